//go:build linux

package conn

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"syscall"
)

// Hangups notices when clients close their connections, for all the
// connections registered with Notify, with one goroutine blocked in
// epoll_wait: a quiet watch writes nothing that could fail, so without it
// each watch kept a goroutine blocked in a Read of its connection only to
// see the close (bench/RESULTS.md ## idle watch cost). A socket is
// registered for EPOLLRDHUP (the client's FIN; EPOLLHUP and EPOLLERR, a
// reset, are always reported) in a second epoll set beside the runtime's
// own: the connection's reads and writes are not touched, and bytes the
// client sends are left unread. Registrations are one-shot and keyed by an
// id that is never reused, so a late event of a connection that was
// closed (its descriptor reused) finds no callback.
//
// The zero value is not usable; a nil *Hangups notices nothing (Notify
// says ok false). Safe for concurrent use.
type Hangups struct {
	epfd int
	wake [2]int // a pipe: Close writes to it to end the loop

	mu     sync.Mutex // guards next, fns and closed
	next   uint64
	fns    map[uint64]func()
	closed bool
	done   chan struct{}
}

// hangupEvents are the events a registration waits for: the peer shut
// down its side (EPOLLHUP and EPOLLERR are implied), once.
const hangupEvents = syscall.EPOLLRDHUP | syscall.EPOLLONESHOT

// NewHangups starts a Hangups and its goroutine; Close ends them.
func NewHangups() (*Hangups, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	h := &Hangups{epfd: epfd, next: 1, fns: map[uint64]func(){}, done: make(chan struct{})}
	if err := syscall.Pipe2(h.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN} // id 0: the wake pipe
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, h.wake[0], &ev); err != nil {
		h.closeFDs()
		return nil, err
	}
	go h.loop()
	return h, nil
}

func (h *Hangups) closeFDs() {
	syscall.Close(h.wake[0])
	syscall.Close(h.wake[1])
	syscall.Close(h.epfd)
}

// Notify calls f once, from the Hangups goroutine, when the client of c
// closes or resets the connection, unless stop is called first (stop
// waits for nothing; f may still run once if the close raced with it). ok
// is false when c's socket cannot be found (c is not a TCP connection
// accepted through this package's wrappers, or h is nil or closed): the
// caller must notice the close itself. f must not block.
func (h *Hangups) Notify(c net.Conn, f func()) (stop func(), ok bool) {
	if h == nil {
		return nil, false
	}
	sc := socketOf(c)
	if sc == nil {
		return nil, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	// The epoll set is changed under mu: Close closes it under mu.
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	id := h.next
	h.next++
	ev := syscall.EpollEvent{Events: hangupEvents, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	var cerr error
	if err := raw.Control(func(fd uintptr) { cerr = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) }); err != nil || cerr != nil {
		return nil, false
	}
	h.fns[id] = f
	return func() { h.stop(id, raw) }, true
}

// stop drops id's callback and takes its socket out of the set (a
// connection closed already left it with its descriptor; one whose
// hang-up was reported is still in it, disabled by EPOLLONESHOT).
func (h *Hangups) stop(id uint64, raw syscall.RawConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.fns, id)
	if !h.closed {
		_ = raw.Control(func(fd uintptr) { _ = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil) })
	}
}

// socketOf returns the socket under c's wrappers (Gate, TLS, Progress),
// or nil.
func socketOf(c net.Conn) syscall.Conn {
	for range 8 {
		switch v := c.(type) {
		case *Gate:
			c = v.Conn
		case *tlsGate:
			c = v.Conn
		case *tls.Conn:
			c = v.NetConn()
		case *Progress:
			c = v.Conn
		case syscall.Conn:
			return v
		default:
			return nil
		}
	}
	return nil
}

// Registered is the number of connections watched now.
func (h *Hangups) Registered() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.fns)
}

func (h *Hangups) loop() {
	defer close(h.done)
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(h.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				return
			}
			h.mu.Lock()
			f := h.fns[id]
			delete(h.fns, id)
			h.mu.Unlock()
			if f != nil {
				f()
			}
		}
	}
}

// Close ends the goroutine; the callbacks still registered are never
// called. Nil-safe.
func (h *Hangups) Close() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	// Once closed, Notify and stop leave the set alone: it is closed
	// below, after the loop ended (the loop takes mu to run a callback).
	h.closed = true
	clear(h.fns)
	h.mu.Unlock()
	_, err := syscall.Write(h.wake[1], []byte{0})
	if err == nil {
		<-h.done
	}
	h.closeFDs()
	return err
}
