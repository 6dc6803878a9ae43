package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/pflag"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
)

// servingFlags are kube-apiserver's secure serving and authentication
// flags.
type servingFlags struct {
	securePort    int // 0: no TLS listener
	tlsCertFile   string
	tlsKeyFile    string
	clientCAFile  string
	tokenAuthFile string
	anonymousAuth bool
	authzModes    string // --authorization-mode as given

	servingTLS *tls.Config  // non-nil when securePort > 0
	authn      authn.Config // ClientCAs and Tokens loaded from the files
	modes      []string     // --authorization-mode parsed; nil: no authorization
}

func (s *servingFlags) addFlags(fs *pflag.FlagSet) {
	fs.IntVar(&s.securePort, "secure-port", 0,
		"The port on which to serve HTTPS (bound to --bind-address), with --tls-cert-file and --tls-private-key-file. 0 (default): no HTTPS.")
	fs.StringVar(&s.tlsCertFile, "tls-cert-file", "",
		"File containing the x509 certificate for HTTPS (CA certificates, if any, concatenated after the server certificate).")
	fs.StringVar(&s.tlsKeyFile, "tls-private-key-file", "", "File containing the x509 private key matching --tls-cert-file.")
	fs.StringVar(&s.clientCAFile, "client-ca-file", "",
		"If set, any request presenting a client certificate signed by one of the authorities in the client-ca-file is authenticated with an identity corresponding to the CommonName of the client certificate (groups: its Organizations). Needs --secure-port.")
	fs.StringVar(&s.tokenAuthFile, "token-auth-file", "",
		"If set, the file that will be used to secure the API via token authentication: CSV lines token,user,uid[,\"group1,group2\"].")
	fs.BoolVar(&s.anonymousAuth, "anonymous-auth", false,
		"Serve requests without credentials as system:anonymous (group system:unauthenticated) when an authenticator is configured; they get what --authorization-mode grants those names. Default false (kube-apiserver's is true).")
	fs.StringVar(&s.authzModes, "authorization-mode", "",
		"Ordered comma-separated list of authorization modes: RBAC (the Roles and bindings in etcd, evaluated locally), AlwaysAllow, AlwaysDeny. The group system:masters is allowed everything. Default: RBAC when an authenticator is configured, none otherwise.")
}

// validate checks the flags against each other and loads the files; every
// error names its flag. port is --port.
func (s *servingFlags) validate(port int) error {
	if s.securePort < 0 || s.securePort > 65535 {
		return usageErrorf("invalid --secure-port %d: must be between 0 and 65535", s.securePort)
	}
	if s.securePort != 0 && s.securePort == port {
		return usageErrorf("invalid --secure-port %d: --port is the same port", s.securePort)
	}
	if (s.tlsCertFile == "") != (s.tlsKeyFile == "") {
		return usageErrorf("--tls-cert-file and --tls-private-key-file must be given together")
	}
	if s.securePort == 0 {
		if s.tlsCertFile != "" {
			return usageErrorf("--tls-cert-file and --tls-private-key-file need --secure-port")
		}
		if s.clientCAFile != "" {
			return usageErrorf("--client-ca-file needs --secure-port (client certificates are sent over TLS)")
		}
	} else {
		if s.tlsCertFile == "" {
			return usageErrorf("--secure-port needs --tls-cert-file and --tls-private-key-file")
		}
		for _, f := range []struct{ flag, path string }{{"--tls-cert-file", s.tlsCertFile}, {"--tls-private-key-file", s.tlsKeyFile}} {
			if _, err := os.Stat(f.path); err != nil {
				return usageErrorf("cannot read %s: %v", f.flag, err)
			}
		}
		cert, err := tls.LoadX509KeyPair(s.tlsCertFile, s.tlsKeyFile)
		if err != nil {
			return usageErrorf("cannot load --tls-cert-file/--tls-private-key-file: %v", err)
		}
		s.servingTLS = &tls.Config{
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS12,
			NextProtos:   []string{"http/1.1"}, // fasthttp serves HTTP/1.1 only
		}
	}
	if s.clientCAFile != "" {
		pool, err := authn.LoadClientCAFile(s.clientCAFile)
		if err != nil {
			return usageErrorf("invalid --client-ca-file: %v", err)
		}
		s.authn.ClientCAs = pool
		// As kube-apiserver: ask for a certificate, verify it per request
		// (authn), so that a bad one is a 401 and not a failed handshake.
		s.servingTLS.ClientAuth = tls.RequestClientCert
		s.servingTLS.ClientCAs = pool
	}
	if s.tokenAuthFile != "" {
		tokens, err := authn.LoadTokenFile(s.tokenAuthFile)
		if err != nil {
			return usageErrorf("invalid --token-auth-file: %v", err)
		}
		s.authn.Tokens = tokens
	}
	s.authn.Anonymous = s.anonymousAuth
	return s.validateAuthz()
}

// validateAuthz parses --authorization-mode: RBAC by default once an
// authenticator is configured; a mode without an authenticator is an
// error (every request would be system:anonymous), except AlwaysAllow.
func (s *servingFlags) validateAuthz() error {
	authenticated := s.authn.ClientCAs != nil || s.authn.Tokens != nil
	if s.authzModes == "" {
		if authenticated {
			s.modes = []string{authz.ModeRBAC}
		}
		return nil
	}
	modes, err := authz.ParseModes(s.authzModes)
	if err != nil {
		return usageErrorf("invalid --authorization-mode: %v", err)
	}
	if slices.Contains(modes, authz.ModeWebhook) {
		return usageErrorf("invalid --authorization-mode: mode Webhook is not supported yet (use RBAC: lazyapi evaluates the cluster's RBAC objects from etcd itself)")
	}
	if !authenticated {
		if len(modes) == 1 && modes[0] == authz.ModeAlwaysAllow {
			return nil
		}
		return usageErrorf("--authorization-mode %s needs an authenticator (--client-ca-file or --token-auth-file)", s.authzModes)
	}
	s.modes = modes
	return nil
}

// authMethods names the configured authenticators for the start log.
func (s *servingFlags) authMethods() []string {
	var m []string
	if s.authn.ClientCAs != nil {
		m = append(m, "x509")
	}
	if s.authn.Tokens != nil {
		m = append(m, fmt.Sprintf("token (%d tokens)", len(s.authn.Tokens)))
	}
	if len(m) > 0 && s.anonymousAuth {
		m = append(m, "anonymous")
	}
	return m
}
