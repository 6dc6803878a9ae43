package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCommandErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"seed"}, "--etcd-servers is required"},
		{[]string{"clean"}, "--etcd-servers is required"},
		{[]string{"seed", "--kind", "node", "--etcd-servers", "http://127.0.0.1:1"}, `unknown --kind "node"`},
		{[]string{"seed", "--size", "zipf:3", "--etcd-servers", "http://127.0.0.1:1"}, "invalid --size"},
		{[]string{"run"}, "run takes one scenario"},
		{[]string{"run", "list"}, "no targets"},
		{[]string{"run", "list", "--target", "nourl"}, "want NAME=URL"},
		{[]string{"run", "list", "--target", "a=http://x", "--token", "b=t"}, `names no --target`},
		{[]string{"run", "list", "--target", "a=http://x", "--accept", "xml"}, `unknown --accept "xml"`},
		{[]string{"run", "watch", "--target", "a=http://x"}, "--etcd-servers is required"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"record"}, "--report is required"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tt.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("lazybench %s: error %v, want it to contain %q", strings.Join(tt.args, " "), err, tt.want)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"run", "--help"}, &out, &out); err != nil || !strings.Contains(out.String(), "--concurrency") {
		t.Errorf("run --help: %v\n%s", err, out.String())
	}
}
