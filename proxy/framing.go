package proxy

import "github.com/lazyapi/lazyapi/codec"

// includeObject maps the (validated) includeObject parameter.
func includeObject(s string) codec.IncludeObjectPolicy {
	p, _ := codec.ParseIncludeObject(s)
	return p
}
