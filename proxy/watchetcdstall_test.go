package proxy_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// putLagConfigMap stores update i of the ConfigMap lag/cm-(i%names), its
// data payload and i, and returns its revision.
func putLagConfigMap(t testing.TB, e *env, i, names int, payload string) int64 {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "lag", Name: fmt.Sprintf("cm-%d", i%names)},
		Data: map[string]string{"payload": payload, "i": strconv.Itoa(i)}}
	val, err := storagefmt.Protobuf(cm)
	if err != nil {
		t.Fatal(err)
	}
	return e.putRaw(t, storagefmt.Key("/registry", "configmaps", "lag", cm.Name), val)
}

// stalledWatch opens a JSON watch of the ConfigMaps of namespace lag from
// rev on addr whose client reads the response's header, then nothing (a
// 16 KiB receive buffer: the socket takes little). The caller closes the
// connection; the response's body reads on.
func stalledWatch(t *testing.T, addr string, rev int64) (net.Conn, *http.Response) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /api/v1/namespaces/lag/configmaps?watch=1&resourceVersion=%d HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n", rev)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		conn.Close()
		t.Fatalf("watch from %d: %v, status %v", rev, err, resp)
	}
	return conn, resp
}
