#!/usr/bin/env bash
# front-proxy-cert.sh issues lazyapi's front-proxy client certificate from
# the cluster's front-proxy CA, as kubeadm lays it out, and writes the
# kubeconfig lazyapi's --upstream-kubeconfig reads to forward to
# kube-apiserver as the caller (docs/operating.md, "Forwarding to
# kube-apiserver").
#
# kube-apiserver trusts X-Remote-User/-Group/-Extra-* only from a client
# certificate of its --requestheader-client-ca-file (kubeadm:
# /etc/kubernetes/pki/front-proxy-ca.crt) whose common name is in
# --requestheader-allowed-names (kubeadm: front-proxy-client). The default
# name is therefore front-proxy-client, which needs no change to
# kube-apiserver; with another --cn, add it to --requestheader-allowed-names.
#
# Run it as root on each control-plane node (the CA key is 0600 root):
#
#   deploy/front-proxy-cert.sh                      # kubeadm defaults
#   deploy/front-proxy-cert.sh --pki DIR --out DIR --server https://10.0.0.11:6443 --days 365 --cn NAME
#   deploy/front-proxy-cert.sh --out DIR --server https://10.0.0.11:6443 --in-pod-dir /etc/lazyapi/upstream
#       for a Secret mounted there (Helm chart forward.enabled, the kustomize
#       overlay deploy/kustomize/forward): the kubeconfig names
#       /etc/lazyapi/upstream/{ca.crt,tls.crt,tls.key}, the Secret's keys.
#
# It writes, in --out (default: --pki):
#   lazyapi-front-proxy-client.crt, lazyapi-front-proxy-client.key  (0600)
#   lazyapi-upstream.conf: kubeconfig naming --server, the cluster CA
#     (--pki/ca.crt) and the certificate above, by path (the static Pod
#     mounts --pki at the same path: deploy/static-pod-forward.yaml).
# The certificate is valid for --days (default 365): renew it as kubeadm
# renews its own (kubeadm certs renew does not know this one); lazyapi
# re-reads nothing here, restart it after a renewal.
# Needs openssl. Nothing is sent anywhere.
set -euo pipefail

pki=/etc/kubernetes/pki
out=""
server=https://127.0.0.1:6443
days=365
cn=front-proxy-client
inpod=""
while [[ $# -gt 0 ]]; do
	case $1 in
	--pki) pki=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--server) server=$2; shift 2 ;;
	--days) days=$2; shift 2 ;;
	--cn) cn=$2; shift 2 ;;
	--in-pod-dir) inpod=$2; shift 2 ;;
	-h | --help) sed -n '2,32p' "$0"; exit 0 ;;
	*) echo "front-proxy-cert.sh: unknown flag $1 (see --help)" >&2; exit 2 ;;
	esac
done
[[ -n $out ]] || out=$pki
ca_crt=$pki/front-proxy-ca.crt
ca_key=$pki/front-proxy-ca.key
cluster_ca=$pki/ca.crt
for f in "$ca_crt" "$ca_key" "$cluster_ca"; do
	if [[ ! -r $f ]]; then
		echo "front-proxy-cert.sh: cannot read $f (--pki $pki: kubeadm's front-proxy-ca.crt, front-proxy-ca.key and ca.crt)" >&2
		exit 1
	fi
done
if ! [[ $days =~ ^[1-9][0-9]*$ ]]; then
	echo "front-proxy-cert.sh: --days $days is not a positive number" >&2
	exit 2
fi
if [[ $server != https://* ]]; then
	echo "front-proxy-cert.sh: --server $server: kube-apiserver must be reached over https" >&2
	exit 2
fi
command -v openssl >/dev/null || { echo "front-proxy-cert.sh: needs openssl" >&2; exit 1; }

mkdir -p "$out"
crt=$out/lazyapi-front-proxy-client.crt
key=$out/lazyapi-front-proxy-client.key
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
umask 077
openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/key.pem" 2>/dev/null
openssl req -new -key "$tmp/key.pem" -subj "/CN=$cn" -out "$tmp/req.csr" 2>/dev/null
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$tmp/ext.cnf"
openssl x509 -req -in "$tmp/req.csr" -CA "$ca_crt" -CAkey "$ca_key" -CAcreateserial -CAserial "$tmp/ca.srl" \
	-days "$days" -sha256 -extfile "$tmp/ext.cnf" -out "$tmp/crt.pem" 2>/dev/null
openssl verify -CAfile "$ca_crt" -purpose sslclient "$tmp/crt.pem" >/dev/null
mv "$tmp/key.pem" "$key"
mv "$tmp/crt.pem" "$crt"
chmod 0600 "$key"
chmod 0644 "$crt"

kc_ca=$cluster_ca kc_crt=$crt kc_key=$key
if [[ -n $inpod ]]; then
	kc_ca=$inpod/ca.crt kc_crt=$inpod/tls.crt kc_key=$inpod/tls.key
fi
cat >"$out/lazyapi-upstream.conf" <<EOF
# lazyapi's --upstream-kubeconfig, written by deploy/front-proxy-cert.sh:
# kube-apiserver's URL and CA, and lazyapi's front-proxy client
# certificate (CN $cn, of $ca_crt).
apiVersion: v1
kind: Config
clusters:
  - name: kube-apiserver
    cluster:
      server: $server
      certificate-authority: $kc_ca
users:
  - name: lazyapi-front-proxy
    user:
      client-certificate: $kc_crt
      client-key: $kc_key
contexts:
  - name: upstream
    context:
      cluster: kube-apiserver
      user: lazyapi-front-proxy
current-context: upstream
EOF
chmod 0600 "$out/lazyapi-upstream.conf"
echo "wrote $crt (CN $cn, $days days), $key and $out/lazyapi-upstream.conf (server $server)"
if [[ $cn != front-proxy-client ]]; then
	echo "add $cn to kube-apiserver's --requestheader-allowed-names" >&2
fi
