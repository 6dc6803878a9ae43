package codec

import "testing"

func TestAppendJSONTypeMeta(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"kind":"ClusterTrustBundle","apiVersion":"certificates.k8s.io/v1beta1","metadata":{"name":"b"},"spec":{}}`,
			`{"kind":"ClusterTrustBundle","apiVersion":"certificates.k8s.io/v1","metadata":{"name":"b"},"spec":{}}`},
		{`{"apiVersion":"certificates.k8s.io/v1beta1","kind":"ClusterTrustBundle","metadata":{"name":"b"}}`,
			`{"kind":"ClusterTrustBundle","apiVersion":"certificates.k8s.io/v1","metadata":{"name":"b"}}`},
		{`{"metadata":{"name":"b"}}`, `{"kind":"ClusterTrustBundle","apiVersion":"certificates.k8s.io/v1","metadata":{"name":"b"}}`},
		{`{}`, `{"kind":"ClusterTrustBundle","apiVersion":"certificates.k8s.io/v1"}`},
	} {
		in := []byte(tt.in)
		if got := string(AppendJSONTypeMeta([]byte("x"), in, "certificates.k8s.io/v1", "ClusterTrustBundle")); got != "x"+tt.want {
			t.Errorf("AppendJSONTypeMeta(%s) = %s, want %s", tt.in, got, tt.want)
		}
		if string(in) != tt.in {
			t.Errorf("AppendJSONTypeMeta modified its input: %s", in)
		}
	}
}
