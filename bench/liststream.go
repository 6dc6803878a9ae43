package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/goccy/go-json"
)

// readList reads a LIST response body (JSON list or Table, or Kubernetes
// protobuf) from r as it streams, counting the items and reading the list
// metadata, and holding only a read buffer: a client that kept whole bodies
// (as parseList needs) held 64 x 1.4 GB when 64 concurrent full LISTs of 1
// GiB arrived fast, and was OOM-killed. It returns the body's size. A body
// that ends early (a truncated stream) is an error.
func readList(r io.Reader) (listInfo, int64, error) {
	cr := &countingReader{r: r}
	br := bufio.NewReaderSize(cr, 64<<10)
	head, err := br.Peek(len(protoMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return listInfo{}, cr.n, err
	}
	var info listInfo
	if bytes.Equal(head, protoMagic) {
		info, err = scanProtoList(br)
	} else {
		info, err = scanJSONList(br)
	}
	return info, cr.n, err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// maxCapture bounds a captured JSON string (keys and values at the top
// level and in the list's metadata: kind, continue, resourceVersion).
const maxCapture = 64 << 10

// jsonLevel is one open object or array of a JSON body.
type jsonLevel struct {
	obj       bool
	expectKey bool   // in an object: the next string is a key
	key       string // in an object: the last key (kept only where captured)
}

// scanJSONList is a byte-level JSON scanner: it tracks nesting, captures
// strings only at the top level and in the top-level "metadata" object,
// and counts the objects of the top-level "items" (or Table "rows") array.
// It checks structure (balanced brackets, closed strings, one top-level
// object), not full JSON grammar.
func scanJSONList(br *bufio.Reader) (listInfo, error) {
	var (
		info     listInfo
		kind     string
		stack    []jsonLevel
		inStr    bool
		esc      bool
		capture  bool
		capBuf   []byte
		sawItems bool
		done     bool
	)
	captureHere := func() bool {
		return len(stack) == 1 || len(stack) == 2 && stack[0].key == "metadata" && stack[1].obj
	}
	endString := func() error {
		if !capture {
			return nil
		}
		var s string
		if bytes.IndexByte(capBuf, '\\') >= 0 {
			q := append(append([]byte{'"'}, capBuf...), '"')
			if err := json.Unmarshal(q, &s); err != nil {
				return fmt.Errorf("cannot parse list: bad string: %w", err)
			}
		} else {
			s = string(capBuf)
		}
		top := &stack[len(stack)-1]
		if top.obj && top.expectKey {
			top.key = s
			return nil
		}
		switch {
		case len(stack) == 1 && top.key == "kind":
			kind = s
		case len(stack) == 2 && top.key == "continue":
			info.Continue = s
		case len(stack) == 2 && top.key == "resourceVersion":
			info.ResourceVersion = s
		}
		return nil
	}
	for {
		chunk, err := br.Peek(br.Buffered())
		if len(chunk) == 0 {
			if _, err = br.Peek(1); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return info, err
			}
			continue
		}
		qpos := -1
		for i := 0; i < len(chunk); i++ {
			c := chunk[i]
			if inStr {
				if esc {
					esc = false
				} else {
					if !capture {
						// Skip to the next quote or backslash.
						// (qpos caches the next quote: a string with an
						// escape every few bytes must not rescan to its end
						// at each one.)
						if qpos < i {
							qpos = bytes.IndexByte(chunk[i:], '"')
							if qpos < 0 {
								qpos = len(chunk)
							} else {
								qpos += i
							}
						}
						j := qpos
						if k := bytes.IndexByte(chunk[i:j], '\\'); k >= 0 {
							j = i + k
						}
						if j == len(chunk) {
							i = len(chunk)
							break
						}
						i = j
						c = chunk[i]
					}
					if c == '\\' {
						esc = true
					} else if c == '"' {
						inStr = false
						if err := endString(); err != nil {
							return info, err
						}
						continue
					}
				}
				if capture {
					if len(capBuf) >= maxCapture {
						return info, errors.New("cannot parse list: string too long in list metadata")
					}
					capBuf = append(capBuf, c)
				}
				continue
			}
			switch c {
			case ' ', '\t', '\n', '\r':
			case '"':
				if len(stack) == 0 {
					return info, errNotList
				}
				inStr, capture = true, captureHere()
				capBuf = capBuf[:0]
			case '{', '[':
				if done {
					return info, errors.New("cannot parse list: data after the list")
				}
				if len(stack) == 0 && c != '{' {
					return info, errNotList
				}
				if len(stack) == 2 && !stack[1].obj && (stack[0].key == "items" || stack[0].key == "rows") {
					info.Items++
				}
				if len(stack) == 1 && c == '[' && (stack[0].key == "items" || stack[0].key == "rows") {
					sawItems = true
				}
				stack = append(stack, jsonLevel{obj: c == '{', expectKey: c == '{'})
			case '}', ']':
				if len(stack) == 0 || stack[len(stack)-1].obj != (c == '}') {
					return info, errors.New("cannot parse list: unbalanced brackets")
				}
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					done = true
				}
			case ':':
				if len(stack) > 0 {
					stack[len(stack)-1].expectKey = false
				}
			case ',':
				if len(stack) > 0 && stack[len(stack)-1].obj {
					stack[len(stack)-1].expectKey = true
				}
			default:
				if len(stack) == 0 {
					return info, errNotList
				}
			}
		}
		if _, err := br.Discard(len(chunk)); err != nil {
			return info, err
		}
	}
	if !done || inStr {
		return info, fmt.Errorf("cannot parse list: %w", io.ErrUnexpectedEOF)
	}
	if !sawItems && kind != "Table" {
		return info, errNotList
	}
	return info, nil
}

// scanProtoList reads a Kubernetes protobuf list (k8s\x00 + runtime.Unknown
// whose raw field is the List message) as it streams: ListMeta (field 1 of
// the list) is read, items (field 2) are counted and skipped.
func scanProtoList(br *bufio.Reader) (listInfo, error) {
	var info listInfo
	if _, err := br.Discard(len(protoMagic)); err != nil {
		return info, err
	}
	fail := func(err error) (listInfo, error) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return info, fmt.Errorf("cannot parse protobuf list: %w", err)
	}
	sawRaw := false
	for {
		key, err := readUvarint(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(err)
		}
		num, typ := key>>3, key&7
		if num == 2 && typ == 2 { // Unknown.raw: the list
			n, err := readUvarint(br)
			if err != nil {
				return fail(err)
			}
			if err := scanProtoListBody(br, int64(n), &info); err != nil {
				return fail(err)
			}
			sawRaw = true
			continue
		}
		if err := skipProtoField(br, typ); err != nil {
			return fail(err)
		}
	}
	if !sawRaw {
		return info, errNotList
	}
	return info, nil
}

// scanProtoListBody reads n bytes of a List message.
func scanProtoListBody(br *bufio.Reader, n int64, info *listInfo) error {
	lr := &limitedByteReader{br: br, n: n}
	for lr.n > 0 {
		key, err := readUvarint(lr)
		if err != nil {
			return err
		}
		num, typ := key>>3, key&7
		switch {
		case num == 1 && typ == 2: // ListMeta
			l, err := readUvarint(lr)
			if err != nil {
				return err
			}
			if l > maxCapture || int64(l) > lr.n {
				return errors.New("bad ListMeta length")
			}
			meta := make([]byte, l)
			if _, err := io.ReadFull(lr, meta); err != nil {
				return err
			}
			if err := readListMeta(meta, info); err != nil {
				return err
			}
		case num == 2 && typ == 2:
			info.Items++
			if err := skipProtoField(lr, typ); err != nil {
				return err
			}
		default:
			if err := skipProtoField(lr, typ); err != nil {
				return err
			}
		}
	}
	return nil
}

// byteReader is what the protobuf scanner reads from.
type byteReader interface {
	io.Reader
	io.ByteReader
	Discard(n int) (int, error)
}

// limitedByteReader reads at most n bytes of br.
type limitedByteReader struct {
	br *bufio.Reader
	n  int64
}

func (l *limitedByteReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.br.Read(p)
	l.n -= int64(n)
	return n, err
}

func (l *limitedByteReader) ReadByte() (byte, error) {
	if l.n <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	b, err := l.br.ReadByte()
	if err == nil {
		l.n--
	}
	return b, err
}

func (l *limitedByteReader) Discard(n int) (int, error) {
	if int64(n) > l.n {
		return 0, errors.New("field longer than its message")
	}
	d, err := l.br.Discard(n)
	l.n -= int64(d)
	return d, err
}

func readUvarint(r io.ByteReader) (uint64, error) {
	var x uint64
	for shift := uint(0); shift < 64; shift += 7 {
		b, err := r.ReadByte()
		if err != nil {
			if shift > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		x |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return x, nil
		}
	}
	return 0, errors.New("bad protobuf varint")
}

// skipProtoField skips the payload of a field of wire type typ.
func skipProtoField(r byteReader, typ uint64) error {
	var n uint64
	switch typ {
	case 0:
		_, err := readUvarint(r)
		return err
	case 1:
		n = 8
	case 5:
		n = 4
	case 2:
		l, err := readUvarint(r)
		if err != nil {
			return err
		}
		n = l
	default:
		return fmt.Errorf("unsupported protobuf wire type %d", typ)
	}
	if n > 1<<40 {
		return errors.New("bad protobuf length")
	}
	for n > 0 {
		step := int(min(n, 1<<30))
		d, err := r.Discard(step)
		n -= uint64(d)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}
