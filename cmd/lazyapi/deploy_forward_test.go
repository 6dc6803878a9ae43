package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// upstreamKubeconfig writes a kubeconfig as deploy/front-proxy-cert.sh
// writes it (kube-apiserver's https URL and CA, a front-proxy client
// certificate by path) and returns its path.
func upstreamKubeconfig(t *testing.T) string {
	t.Helper()
	ca := testpki.NewCA(t, "front-proxy-ca")
	c := ca.Client(t, "front-proxy-client")
	path := filepath.Join(t.TempDir(), "lazyapi-upstream.conf")
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: kube, cluster: {server: \"https://127.0.0.1:6443\", certificate-authority: " + ca.File + "}}]\n" +
		"users: [{name: fp, user: {client-certificate: " + c.CertFile + ", client-key: " + c.KeyFile + "}}]\n" +
		"contexts: [{name: upstream, context: {cluster: kube, user: fp}}]\ncurrent-context: upstream\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDeployStaticPodForward: deploy/static-pod-forward.yaml is
// deploy/static-pod.yaml plus --upstream-kubeconfig, naming a file under a
// path the Pod mounts (where front-proxy-cert.sh writes it), and its own
// app.kubernetes.io/instance; lazyapi accepts its flags.
func TestDeployStaticPodForward(t *testing.T) {
	plain := decodeManifests(t, "static-pod.yaml")[0].(*corev1.Pod)
	objs := decodeManifests(t, "static-pod-forward.yaml")
	pod, ok := objs[0].(*corev1.Pod)
	if !ok || len(objs) != 1 {
		t.Fatalf("static-pod-forward.yaml holds %d objects, the first a %T; want one Pod", len(objs), objs[0])
	}
	c := &pod.Spec.Containers[0]
	args := containerArgs(*c)
	kc := flagValue(args, "upstream-kubeconfig")
	if kc != "/etc/kubernetes/pki/lazyapi-upstream.conf" {
		t.Errorf("--upstream-kubeconfig=%q, want front-proxy-cert.sh's /etc/kubernetes/pki/lazyapi-upstream.conf", kc)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(kc, m.MountPath+"/") {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("--upstream-kubeconfig=%s is not under a mounted path", kc)
	}
	if pod.Labels["app.kubernetes.io/instance"] == plain.Labels["app.kubernetes.io/instance"] || pod.Labels["app.kubernetes.io/instance"] == "" {
		t.Errorf("instance label %q, want its own (the plain one is %q)", pod.Labels["app.kubernetes.io/instance"], plain.Labels["app.kubernetes.io/instance"])
	}
	// Nothing else differs.
	c.Command = slices.DeleteFunc(c.Command, func(a string) bool { return strings.HasPrefix(a, "--upstream-kubeconfig=") })
	pod.Labels["app.kubernetes.io/instance"] = plain.Labels["app.kubernetes.io/instance"]
	if !reflect.DeepEqual(pod, plain) {
		t.Errorf("static-pod-forward.yaml differs from static-pod.yaml beyond --upstream-kubeconfig and the instance label")
	}
	c.Command = append(c.Command, "--upstream-kubeconfig="+kc)
	if !hasUpstreamFlag() {
		t.Skip("this lazyapi has no --upstream-kubeconfig (forwarding not built): its flags are not checked")
	}
	checkPodSpec(t, "forwarding static Pod", &pod.Spec)
}

// hasUpstreamFlag reports whether lazyapi has --upstream-kubeconfig.
func hasUpstreamFlag() bool {
	_, err := parseFlags([]string{"--upstream-kubeconfig="})
	return err == nil || !strings.Contains(err.Error(), "unknown flag")
}

// TestFrontProxyCertScript runs deploy/front-proxy-cert.sh on a kubeadm
// layout (front-proxy-ca.crt and .key, ca.crt): the certificate it issues
// is a client certificate of the front-proxy CA named front-proxy-client
// (kubeadm's --requestheader-allowed-names), its key matches and is 0600,
// and the kubeconfig it writes names the server, the cluster CA and that
// certificate; another --cn is reminded of --requestheader-allowed-names,
// and bad flags fail before anything is written.
func TestFrontProxyCertScript(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not on PATH: front-proxy-cert.sh needs it")
	}
	script, err := filepath.Abs(filepath.Join(deployDir, "front-proxy-cert.sh"))
	if err != nil {
		t.Fatal(err)
	}
	pki := t.TempDir()
	fp, cluster := testpki.NewCA(t, "front-proxy-ca"), testpki.NewCA(t, "kubernetes")
	copyFile(t, fp.File, filepath.Join(pki, "front-proxy-ca.crt"))
	copyFile(t, cluster.File, filepath.Join(pki, "ca.crt"))
	der, err := x509.MarshalECPrivateKey(fp.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pki, "front-proxy-ca.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command("bash", append([]string{script, "--pki", pki}, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	out := t.TempDir()
	if so, se, err := run("--out", out, "--server", "https://10.0.0.11:6443", "--days", "30"); err != nil {
		t.Fatalf("front-proxy-cert.sh: %v\n%s%s", err, so, se)
	}
	crtFile, keyFile := filepath.Join(out, "lazyapi-front-proxy-client.crt"), filepath.Join(out, "lazyapi-front-proxy-client.key")
	pair, err := tls.LoadX509KeyPair(crtFile, keyFile)
	if err != nil {
		t.Fatalf("the certificate and key do not pair: %v", err)
	}
	crt, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(fp.Cert)
	if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("not a client certificate of the front-proxy CA: %v", err)
	}
	if crt.Subject.CommonName != "front-proxy-client" || crt.IsCA {
		t.Errorf("CN %q, CA %v; want front-proxy-client, not a CA", crt.Subject.CommonName, crt.IsCA)
	}
	// The test CA lives an hour: the certificate's validity is cut to
	// --days from now, not beyond what openssl was asked.
	if d := time.Until(crt.NotAfter); d > 31*24*time.Hour {
		t.Errorf("valid for %s, want --days 30", d)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	cfg, err := clientcmd.LoadFromFile(filepath.Join(out, "lazyapi-upstream.conf"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://10.0.0.11:6443" || rc.CAFile != filepath.Join(pki, "ca.crt") || rc.CertFile != crtFile || rc.KeyFile != keyFile ||
		rc.BearerToken != "" {
		t.Errorf("kubeconfig: host %q CA %q cert %q key %q token %q", rc.Host, rc.CAFile, rc.CertFile, rc.KeyFile, rc.BearerToken)
	}

	// For a Secret mounted in a Pod: the kubeconfig names the Secret's keys
	// under the mount.
	inPod := t.TempDir()
	if so, se, err := run("--out", inPod, "--in-pod-dir", "/etc/lazyapi/upstream"); err != nil {
		t.Fatalf("--in-pod-dir: %v\n%s%s", err, so, se)
	}
	if cfg, err = clientcmd.LoadFromFile(filepath.Join(inPod, "lazyapi-upstream.conf")); err != nil {
		t.Fatal(err)
	}
	// (Files of the Pod: not read here.)
	u, cl := cfg.AuthInfos["lazyapi-front-proxy"], cfg.Clusters["kube-apiserver"]
	if u == nil || cl == nil || cl.CertificateAuthority != "/etc/lazyapi/upstream/ca.crt" ||
		u.ClientCertificate != "/etc/lazyapi/upstream/tls.crt" || u.ClientKey != "/etc/lazyapi/upstream/tls.key" {
		t.Errorf("--in-pod-dir kubeconfig: cluster %+v user %+v", cl, u)
	}

	other := t.TempDir()
	if _, se, err := run("--out", other, "--cn", "lazyapi-front-proxy"); err != nil || !strings.Contains(se, "--requestheader-allowed-names") {
		t.Errorf("--cn lazyapi-front-proxy: %v, stderr %q; want success and a reminder of --requestheader-allowed-names", err, se)
	}
	for _, bad := range [][]string{{"--server", "http://127.0.0.1:6443"}, {"--days", "0"}, {"--bogus"}} {
		dir := t.TempDir()
		if _, _, err := run(append([]string{"--out", dir}, bad...)...); err == nil {
			t.Errorf("front-proxy-cert.sh %q succeeded", bad)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("front-proxy-cert.sh %q wrote %d files", bad, len(entries))
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
