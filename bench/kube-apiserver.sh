#!/usr/bin/env bash
# kube-apiserver.sh builds kube-apiserver from its Go module and starts it on
# loopback against a given etcd, as the real peer for lazybench.
#
#   bench/kube-apiserver.sh build
#       builds k8s.io/kubernetes/cmd/kube-apiserver at $KUBE_VERSION in a
#       throwaway module under $CACHE and prints the binary's path.
#   bench/kube-apiserver.sh start --etcd-servers URL [--etcd-prefix /registry]
#       [--port 6443] [--watch-cache true|false] [--dir DIR] [--token TOKEN]
#       [--encryption-provider-config FILE] [--front-proxy]
#       [--authorization-mode MODES] [--extra-tokens FILE]
#       runs kube-apiserver in the foreground (exec) with a token file,
#       AlwaysAllow, a generated service-account key, a self-signed serving
#       cert in DIR, --endpoint-reconciler-type=none. Clients use
#       https://127.0.0.1:PORT with "Authorization: Bearer TOKEN" and skip TLS
#       verification (loopback only). --front-proxy sets the
#       --requestheader-* flags as kubeadm does, with a CA and a client
#       certificate for CN front-proxy-client made in DIR/front-proxy
#       (ca.crt, client.crt, client.key: lazyapi's --upstream-kubeconfig),
#       and writes an audit log (Metadata) to DIR/audit.log.
#       --authorization-mode replaces AlwaysAllow (kubeadm: Node,RBAC; the
#       admin token's user is in system:masters); --extra-tokens appends a
#       token file's lines (more users) to the admin's. Arguments after --
#       are passed to kube-apiserver as they are (for example
#       --enable-aggregator-routing=true).
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
STAGING_VERSION=${STAGING_VERSION:-v0.${KUBE_VERSION#v1.}}
CACHE=${LAZYBENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lazybench}
MODDIR=$CACHE/kube-apiserver-$KUBE_VERSION
BIN=$MODDIR/bin/kube-apiserver

build() {
	if [[ -x $BIN ]]; then
		echo "$BIN"
		return
	fi
	mkdir -p "$MODDIR/bin"
	cd "$MODDIR"
	local gomod
	gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	{
		echo "module lazybench/kubeapiserver"
		echo
		echo "go 1.26"
		echo
		echo "replace ("
		# Every k8s.io/* staging module that kubernetes replaces with
		# ./staging/src/... is taken from the module proxy at the matching
		# v0.X.Y instead.
		sed -n 's#^\s*\(k8s.io/[^ ]*\) => ./staging/src/.*#\t\1 => \1 '"$STAGING_VERSION"'#p' "$gomod"
		echo ")"
	} >go.mod
	cat >tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
	echo "building kube-apiserver $KUBE_VERSION in $MODDIR (several minutes)" >&2
	local start=$SECONDS
	GOFLAGS=-mod=mod go get "k8s.io/kubernetes@$KUBE_VERSION" >&2
	GOFLAGS=-mod=mod nice go build -o "$BIN.tmp" k8s.io/kubernetes/cmd/kube-apiserver >&2
	mv "$BIN.tmp" "$BIN"
	echo "built $BIN in $((SECONDS - start))s" >&2
	echo "$BIN"
}

start() {
	local etcd="" prefix=/registry port=6443 watchcache=true dir="" token=lazybench-token enc="" fp="" authz=AlwaysAllow extratokens="" pass=()
	while [[ $# -gt 0 ]]; do
		case $1 in
		--etcd-servers) etcd=$2; shift 2 ;;
		--etcd-prefix) prefix=$2; shift 2 ;;
		--port) port=$2; shift 2 ;;
		--watch-cache) watchcache=$2; shift 2 ;;
		--dir) dir=$2; shift 2 ;;
		--token) token=$2; shift 2 ;;
		--encryption-provider-config) enc=$2; shift 2 ;;
		--front-proxy) fp=1; shift ;;
		--authorization-mode) authz=$2; shift 2 ;;
		--extra-tokens) extratokens=$2; shift 2 ;;
		--) shift; pass=("$@"); break ;;
		*) echo "unknown flag $1" >&2; exit 2 ;;
		esac
	done
	if [[ -z $etcd ]]; then
		echo "--etcd-servers is required" >&2
		exit 2
	fi
	[[ -n $dir ]] || dir=$(mktemp -d -t kube-apiserver.XXXXXX)
	mkdir -p "$dir/certs"
	local bin
	bin=$(build)
	echo "$token,lazybench,lazybench-uid,system:masters" >"$dir/tokens.csv"
	[[ -z $extratokens ]] || cat "$extratokens" >>"$dir/tokens.csv"
	if [[ ! -f $dir/sa.key ]]; then
		openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
		openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
	fi
	local fpflags=()
	if [[ -n $fp ]]; then
		local d=$dir/front-proxy
		mkdir -p "$d"
		if [[ ! -f $d/client.crt ]]; then
			openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=front-proxy-ca \
				-keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=front-proxy-client \
				-keyout "$d/client.key" -out "$d/client.csr" 2>/dev/null
			printf 'extendedKeyUsage=clientAuth\n' >"$d/ext"
			openssl x509 -req -in "$d/client.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
				-extfile "$d/ext" -out "$d/client.crt" 2>/dev/null
		fi
		printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n' >"$dir/audit-policy.yaml"
		fpflags=(--requestheader-client-ca-file="$d/ca.crt" --requestheader-allowed-names=front-proxy-client
			--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group
			--requestheader-uid-headers=X-Remote-Uid --requestheader-extra-headers-prefix=X-Remote-Extra-
			--audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/audit.log")
	fi
	exec "$bin" "${fpflags[@]}" \
		--bind-address=127.0.0.1 \
		--advertise-address=127.0.0.1 \
		--secure-port="$port" \
		--cert-dir="$dir/certs" \
		--etcd-servers="$etcd" \
		--etcd-prefix="$prefix" \
		--watch-cache="$watchcache" \
		--token-auth-file="$dir/tokens.csv" \
		--authorization-mode="$authz" \
		--service-account-issuer=https://kubernetes.default.svc \
		--service-account-key-file="$dir/sa.pub" \
		--service-account-signing-key-file="$dir/sa.key" \
		--service-cluster-ip-range=10.0.0.0/24 \
		--endpoint-reconciler-type=none \
		--enable-priority-and-fairness=false \
		--profiling=false \
		${enc:+--encryption-provider-config="$enc"} \
		--v=0 "${pass[@]}"
}

case ${1:-} in
build) build ;;
start) shift; start "$@" ;;
path) echo "$BIN"; [[ -x $BIN ]] ;;
*) echo "usage: $0 build | path | start --etcd-servers URL [--etcd-prefix P] [--port N] [--watch-cache true|false] [--dir D] [--token T] [--encryption-provider-config F] [--front-proxy] [--authorization-mode M] [--extra-tokens F] [-- kube-apiserver flags]" >&2; exit 2 ;;
esac
