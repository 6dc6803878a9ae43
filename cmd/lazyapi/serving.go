package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/keyutil"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authn/tokenreview"
	"github.com/lazyapi/lazyapi/authz"
	authzwebhook "github.com/lazyapi/lazyapi/authz/webhook"
	"github.com/lazyapi/lazyapi/internal/certfile"
	"github.com/lazyapi/lazyapi/proxy"
)

// servingOptions are the serving, authentication and authorization flags
// (kube-apiserver's secure serving, authentication and authorization
// options, and lazyapi's plain port).
type servingOptions struct {
	bindAddress    net.IP
	port           int  // --port: plain HTTP; 0: off (the default with an authenticator)
	plainTokens    bool // --plain-port-tokens: accept bearer tokens on --port
	requestTimeout time.Duration
	writeTimeout   time.Duration // --write-timeout
	compression    bool          // --enable-response-compression

	securePort    int // 0: no TLS listener
	tlsCertFile   string
	tlsKeyFile    string
	clientCAFile  string
	tokenAuthFile string
	anonymousAuth bool
	authzModes    string // --authorization-mode as given
	saKeyFiles    []string
	saIssuers     []string
	apiAudiences  []string
	saLookup      bool
	saKeys        []any // public keys loaded from saKeyFiles

	// kube-apiserver's --tls-min-version and --tls-cipher-suites, as given
	// and parsed (tlsMin 0 and tlsSuites nil: Go's defaults, TLS 1.2).
	tlsMinVersionName string
	tlsSuiteNames     []string
	tlsMin            uint16
	tlsSuites         []uint16

	// Delegated authentication (TokenReview) and the Webhook mode
	// (SubjectAccessReview): k8s.io/apiserver's flags.
	authnKubeconfig      string        // --authentication-kubeconfig
	authnWebhookConfig   string        // --authentication-token-webhook-config-file
	authnWebhookVersion  string        // --authentication-token-webhook-version
	authnWebhookCacheTTL time.Duration // --authentication-token-webhook-cache-ttl
	authzKubeconfig      string        // --authorization-kubeconfig
	authzWebhookConfig   string        // --authorization-webhook-config-file
	authzWebhookVersion  string        // --authorization-webhook-version
	authzAuthorizedTTL   time.Duration // --authorization-webhook-cache-authorized-ttl
	authzUnauthorizedTTL time.Duration // --authorization-webhook-cache-unauthorized-ttl

	servingTLS *tls.Config                 // non-nil when securePort > 0; hands out currentTLS per handshake
	keyPair    *certfile.KeyPair           // --tls-cert-file/--tls-private-key-file, reloaded on change
	clientCAs  *certfile.CAs               // --client-ca-file, reloaded on change
	tlsCur     *atomic.Pointer[tls.Config] // the configuration in force; set with keyPair
	authn      authn.Config                // ClientCAs and Tokens loaded from the files
	modes      []string                    // --authorization-mode parsed; nil: no authorization
}

func (s *servingOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("serving")
	fs.IPVar(&s.bindAddress, "bind-address", net.ParseIP("127.0.0.1"),
		"The IP address on which to listen for --port and --secure-port. Use 0.0.0.0 or :: for all interfaces.")
	fs.IntVar(&s.port, "port", 8080,
		"The port on which to serve plain HTTP (no TLS), bound to --bind-address. 0 turns it off. Default 8080 without authentication; off when an authenticator is configured (--client-ca-file, --token-auth-file, --service-account-key-file, --authentication-kubeconfig, --authentication-token-webhook-config-file) unless --port is given.")
	fs.BoolVar(&s.plainTokens, "plain-port-tokens", false,
		"With an authenticator: accept bearer tokens on --port, where they travel in clear text. Default false: a request with an Authorization header on --port is answered 401, and /debug/pprof/ is served on --secure-port only.")
	fs.IntVar(&s.securePort, "secure-port", 0,
		"The port on which to serve HTTPS (bound to --bind-address), with --tls-cert-file and --tls-private-key-file. 0 (default): no HTTPS.")
	fs.StringVar(&s.tlsCertFile, "tls-cert-file", "",
		"File containing the x509 certificate for HTTPS (CA certificates, if any, concatenated after the server certificate).")
	fs.StringVar(&s.tlsKeyFile, "tls-private-key-file", "", "File containing the x509 private key matching --tls-cert-file.")
	fs.StringSliceVar(&s.tlsSuiteNames, "tls-cipher-suites", nil,
		"Comma-separated list of cipher suites for --secure-port (TLS 1.2; TLS 1.3's are not configurable). If omitted, the default Go cipher suites will be used. Preferred values: "+
			strings.Join(cliflag.PreferredTLSCipherNames(), ", ")+". Insecure values: "+strings.Join(cliflag.InsecureTLSCipherNames(), ", ")+".")
	fs.StringVar(&s.tlsMinVersionName, "tls-min-version", "",
		"Minimum TLS version supported by --secure-port. Possible values: "+strings.Join(cliflag.TLSPossibleVersions(), ", ")+". Default VersionTLS12.")
	fs.DurationVar(&s.requestTimeout, "request-timeout", proxy.DefaultRequestTimeout,
		"Upper bound on a non-watch request, and on draining in-flight requests at shutdown.")
	fs.DurationVar(&s.writeTimeout, "write-timeout", proxy.DefaultWriteTimeout,
		"Longest a streamed response (LIST, watch) may make no write progress (its client takes none of its bytes) before it is aborted and its admission released.")
	fs.BoolVar(&s.compression, "enable-response-compression", true,
		"Compress GET and LIST responses larger than 128 KiB with gzip when the client accepts it (never watches), as kube-apiserver's APIResponseCompression.")

	fs = fss.FlagSet("authentication")
	fs.StringVar(&s.clientCAFile, "client-ca-file", "",
		"If set, any request presenting a client certificate signed by one of the authorities in the client-ca-file is authenticated with an identity corresponding to the CommonName of the client certificate (groups: its Organizations). Needs --secure-port.")
	fs.StringVar(&s.tokenAuthFile, "token-auth-file", "",
		"If set, the file that will be used to secure the API via token authentication: CSV lines token,user,uid[,\"group1,group2\"].")
	fs.BoolVar(&s.anonymousAuth, "anonymous-auth", false,
		"Serve requests without credentials as system:anonymous (group system:unauthenticated) when an authenticator is configured; they get what --authorization-mode grants those names. Default false (kube-apiserver's is true).")
	fs.StringArrayVar(&s.saKeyFiles, "service-account-key-file", nil,
		"File containing PEM-encoded x509 RSA or ECDSA private or public keys (or certificates), used to verify ServiceAccount tokens. Repeatable; copy kube-apiserver's.")
	fs.StringArrayVar(&s.saIssuers, "service-account-issuer", nil,
		"Identifier of the service account token issuer (the \"iss\" of bound tokens). Repeatable; copy kube-apiserver's. Needs --service-account-key-file.")
	fs.StringSliceVar(&s.apiAudiences, "api-audiences", nil,
		"Identifiers of the API: a service account token must be issued for one of them. Default: the first --service-account-issuer.")
	fs.BoolVar(&s.saLookup, "service-account-lookup", true,
		"Accept a legacy (Secret-based) service account token only while its Secret still holds it and its ServiceAccount exists.")
	fs.StringVar(&s.authnKubeconfig, "authentication-kubeconfig", "",
		"kubeconfig file pointing at the 'core' kubernetes server: bearer tokens lazyapi cannot verify itself (not in --token-auth-file, not a valid service account token) are sent to it as TokenReviews (authentication.k8s.io/v1), as aggregated API servers delegate.")
	fs.StringVar(&s.authnWebhookConfig, "authentication-token-webhook-config-file", "",
		"File with webhook configuration for token authentication in kubeconfig format (kube-apiserver's): the cluster's server URL receives the TokenReviews. Instead of --authentication-kubeconfig.")
	fs.StringVar(&s.authnWebhookVersion, "authentication-token-webhook-version", "v1beta1",
		"The API version of the authentication.k8s.io TokenReview to send to the webhook of --authentication-token-webhook-config-file: v1 or v1beta1.")
	fs.DurationVar(&s.authnWebhookCacheTTL, "authentication-token-webhook-cache-ttl", tokenreview.DefaultCacheTTL,
		"The duration to cache responses (positive and negative) from the token authenticator webhook. kube-apiserver's own default is 2m.")

	fs = fss.FlagSet("authorization")
	fs.StringVar(&s.authzModes, "authorization-mode", "",
		"Ordered comma-separated list of authorization modes: RBAC (the Roles and bindings in etcd, evaluated locally), Webhook (a SubjectAccessReview through --authorization-kubeconfig or --authorization-webhook-config-file), AlwaysAllow, AlwaysDeny. The group system:masters is allowed everything. Default: RBAC when an authenticator is configured, none otherwise.")
	fs.StringVar(&s.authzKubeconfig, "authorization-kubeconfig", "",
		"kubeconfig file pointing at the 'core' kubernetes server: the Webhook mode creates SubjectAccessReviews (authorization.k8s.io/v1) there, as aggregated API servers delegate.")
	fs.StringVar(&s.authzWebhookConfig, "authorization-webhook-config-file", "",
		"File with webhook configuration in kubeconfig format for --authorization-mode=Webhook (kube-apiserver's): the cluster's server URL receives the SubjectAccessReviews. Instead of --authorization-kubeconfig.")
	fs.StringVar(&s.authzWebhookVersion, "authorization-webhook-version", "v1beta1",
		"The API version of the authorization.k8s.io SubjectAccessReview to send to the webhook of --authorization-webhook-config-file: v1 or v1beta1.")
	fs.DurationVar(&s.authzAuthorizedTTL, "authorization-webhook-cache-authorized-ttl", authzwebhook.DefaultAuthorizedTTL,
		"The duration to cache 'authorized' responses from the webhook authorizer.")
	fs.DurationVar(&s.authzUnauthorizedTTL, "authorization-webhook-cache-unauthorized-ttl", authzwebhook.DefaultUnauthorizedTTL,
		"The duration to cache 'unauthorized' responses from the webhook authorizer.")
}

// validate checks the flags against each other and loads the files; every
// error names its flag.
func (s *servingOptions) validate(*Options) []error {
	var errs []error
	if s.port < 0 || s.port > 65535 {
		errs = append(errs, flagError("port", "%d: must be between 0 and 65535", s.port))
	}
	if s.requestTimeout <= 0 {
		errs = append(errs, flagError("request-timeout", "%s: must be greater than 0", s.requestTimeout))
	}
	if s.writeTimeout <= 0 {
		errs = append(errs, flagError("write-timeout", "%s: must be greater than 0", s.writeTimeout))
	}
	if err := s.load(); err != nil {
		return append(errs, err)
	}
	if err := s.validatePlainPort(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// validatePlainPort applies the plain port's rule (complete turned --port
// off with an authenticator unless given): a port to serve on, and no
// bearer tokens on --port unless --plain-port-tokens.
func (s *servingOptions) validatePlainPort() error {
	if s.port == 0 && s.securePort == 0 {
		if s.authenticated() {
			return flagError("port", "nothing to serve on: with an authenticator --port is off unless given; add --secure-port with --tls-cert-file and --tls-private-key-file (or give --port, plain HTTP)")
		}
		return flagError("port", "nothing to serve on: --port and --secure-port are both 0 (off)")
	}
	if s.port != 0 && s.securePort == s.port {
		return flagError("secure-port", "%d: --port is the same port", s.port)
	}
	if s.plainTokens && s.port == 0 {
		return flagError("plain-port-tokens", "needs --port")
	}
	return nil
}

// load checks the TLS and authentication flags and loads their files.
func (s *servingOptions) load() error {
	if s.securePort < 0 || s.securePort > 65535 {
		return flagError("secure-port", "%d: must be between 0 and 65535", s.securePort)
	}
	if err := pairedFlags("tls-cert-file", s.tlsCertFile, "tls-private-key-file", s.tlsKeyFile); err != nil {
		return err
	}
	if err := s.validateTLSFlags(); err != nil {
		return err
	}
	if s.securePort == 0 {
		if s.tlsCertFile != "" {
			return flagError("tls-cert-file", "needs --secure-port (with --tls-private-key-file)")
		}
		if s.clientCAFile != "" {
			return flagError("client-ca-file", "needs --secure-port (client certificates are sent over TLS)")
		}
	} else {
		if s.tlsCertFile == "" {
			return flagError("secure-port", "needs --tls-cert-file and --tls-private-key-file")
		}
		kp, err := loadKeyPair("tls-cert-file", s.tlsCertFile, "tls-private-key-file", s.tlsKeyFile)
		if err != nil {
			return err
		}
		s.keyPair = kp
	}
	if s.clientCAFile != "" {
		if _, err := authn.LoadClientCAFile(s.clientCAFile); err != nil {
			return flagError("client-ca-file", "%v", err)
		}
		cas, err := certfile.LoadCAs(s.clientCAFile)
		if err != nil {
			return flagError("client-ca-file", "%v", err)
		}
		s.clientCAs = cas
		s.authn.ClientCAs = cas.Pool()
	}
	if s.keyPair != nil {
		// Every handshake takes the configuration in force, so that a
		// reloaded certificate or client CA serves new connections at
		// once (as kube-apiserver's dynamic serving certificates).
		cur := new(atomic.Pointer[tls.Config])
		s.tlsCur = cur
		cur.Store(s.currentTLS())
		s.servingTLS = &tls.Config{
			MinVersion: s.tlsMin,
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				return cur.Load(), nil
			},
		}
	}
	if err := s.loadAuthn(); err != nil {
		return err
	}
	if err := s.validateWebhookFlags(); err != nil {
		return err
	}
	return s.validateAuthz()
}

// loadAuthn loads the token file and the service account keys.
func (s *servingOptions) loadAuthn() error {
	if s.tokenAuthFile != "" {
		tokens, err := authn.LoadTokenFile(s.tokenAuthFile)
		if err != nil {
			return flagError("token-auth-file", "%v", err)
		}
		s.authn.Tokens = tokens
	}
	s.authn.Anonymous = s.anonymousAuth
	if len(s.saIssuers) > 0 && len(s.saKeyFiles) == 0 {
		return flagError("service-account-issuer", "needs --service-account-key-file")
	}
	if len(s.apiAudiences) > 0 && len(s.saKeyFiles) == 0 {
		return flagError("api-audiences", "needs --service-account-key-file")
	}
	for _, f := range s.saKeyFiles {
		keys, err := keyutil.PublicKeysFromFile(f)
		if err != nil {
			return flagError("service-account-key-file", "%v", err)
		}
		s.saKeys = append(s.saKeys, keys...)
	}
	return nil
}

// validateTLSFlags parses --tls-min-version and --tls-cipher-suites with
// kube-apiserver's parsers (names of crypto/tls, legacy names included).
func (s *servingOptions) validateTLSFlags() error {
	v, err := cliflag.TLSVersion(s.tlsMinVersionName)
	if err != nil {
		return flagError("tls-min-version", "%q: want one of %s", s.tlsMinVersionName, strings.Join(cliflag.TLSPossibleVersions(), ", "))
	}
	s.tlsMin = v
	names := trimEmpty(s.tlsSuiteNames)
	suites, err := cliflag.TLSCipherSuites(names)
	if err != nil {
		return flagError("tls-cipher-suites", "%v", err)
	}
	s.tlsSuites = suites
	if s.securePort == 0 {
		switch {
		case s.tlsMinVersionName != "":
			return flagError("tls-min-version", "needs --secure-port")
		case len(names) > 0:
			return flagError("tls-cipher-suites", "needs --secure-port")
		}
	}
	return nil
}

// insecureSuites returns the --tls-cipher-suites crypto/tls calls insecure,
// for a warning at start (kube-apiserver warns too).
func (s *servingOptions) insecureSuites() []string {
	var out []string
	for _, id := range s.tlsSuites {
		for _, cs := range tls.InsecureCipherSuites() {
			if cs.ID == id {
				out = append(out, cs.Name)
			}
		}
	}
	return out
}

// validateWebhookFlags checks the TokenReview and SubjectAccessReview
// flags: one way to reach each service, a readable file, a known version,
// no negative TTL.
func (s *servingOptions) validateWebhookFlags() error {
	for _, p := range []struct{ a, b, aFlag, bFlag string }{
		{s.authnKubeconfig, s.authnWebhookConfig, "authentication-kubeconfig", "authentication-token-webhook-config-file"},
		{s.authzKubeconfig, s.authzWebhookConfig, "authorization-kubeconfig", "authorization-webhook-config-file"},
	} {
		if p.a != "" && p.b != "" {
			return flagError(p.aFlag, "cannot be given with --%s: give one", p.bFlag)
		}
		for _, f := range []struct{ flag, path string }{{p.aFlag, p.a}, {p.bFlag, p.b}} {
			if f.path == "" {
				continue
			}
			if _, err := os.Stat(f.path); err != nil {
				return flagError(f.flag, "cannot read: %v", err)
			}
		}
	}
	for _, v := range []struct{ flag, value string }{
		{"authentication-token-webhook-version", s.authnWebhookVersion},
		{"authorization-webhook-version", s.authzWebhookVersion},
	} {
		if v.value != "v1" && v.value != "v1beta1" {
			return flagError(v.flag, "%q: must be v1 or v1beta1", v.value)
		}
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"authentication-token-webhook-cache-ttl", s.authnWebhookCacheTTL},
		{"authorization-webhook-cache-authorized-ttl", s.authzAuthorizedTTL},
		{"authorization-webhook-cache-unauthorized-ttl", s.authzUnauthorizedTTL},
	} {
		if d.value < 0 {
			return flagError(d.flag, "%v: must not be negative", d.value)
		}
	}
	return nil
}

// authenticated reports whether an authenticator is configured.
func (s *servingOptions) authenticated() bool {
	return s.clientCAFile != "" || s.tokenAuthFile != "" || len(s.saKeyFiles) > 0 || s.tokenReview()
}

// tokenReview reports whether bearer tokens are delegated (TokenReview).
func (s *servingOptions) tokenReview() bool {
	return s.authnKubeconfig != "" || s.authnWebhookConfig != ""
}

// validateAuthz parses --authorization-mode: RBAC by default once an
// authenticator is configured; a mode without an authenticator is an
// error (every request would be system:anonymous), except AlwaysAllow.
func (s *servingOptions) validateAuthz() error {
	authenticated := s.authenticated()
	webhookFlag := "authorization-kubeconfig"
	if s.authzWebhookConfig != "" {
		webhookFlag = "authorization-webhook-config-file"
	}
	webhookConfigured := s.authzKubeconfig != "" || s.authzWebhookConfig != ""
	if s.authzModes == "" {
		if webhookConfigured {
			return flagError(webhookFlag, "is used by --authorization-mode Webhook only: add it to the chain (e.g. --authorization-mode=RBAC,Webhook)")
		}
		if authenticated {
			s.modes = []string{authz.ModeRBAC}
		}
		return nil
	}
	modes, err := authz.ParseModes(s.authzModes)
	if err != nil {
		return flagError("authorization-mode", "%v", err)
	}
	switch hasWebhook := slices.Contains(modes, authz.ModeWebhook); {
	case hasWebhook && !webhookConfigured:
		return flagError("authorization-mode", "%s needs --authorization-kubeconfig or --authorization-webhook-config-file (where to send SubjectAccessReviews)", s.authzModes)
	case !hasWebhook && webhookConfigured:
		return flagError(webhookFlag, "is used by --authorization-mode Webhook only, which --authorization-mode %s does not name", s.authzModes)
	}
	if !authenticated {
		if len(modes) == 1 && modes[0] == authz.ModeAlwaysAllow {
			return nil
		}
		return flagError("authorization-mode", "%s needs an authenticator (--client-ca-file, --token-auth-file, --service-account-key-file or --authentication-kubeconfig)", s.authzModes)
	}
	s.modes = modes
	return nil
}

// currentTLS builds the serving TLS configuration from the key pair and
// client CAs in force.
func (s *servingOptions) currentTLS() *tls.Config {
	cfg := &tls.Config{
		GetCertificate: s.keyPair.GetCertificate,
		MinVersion:     s.tlsMin,
		CipherSuites:   s.tlsSuites,
		NextProtos:     []string{"http/1.1"}, // fasthttp serves HTTP/1.1 only
	}
	if s.clientCAs != nil {
		// As kube-apiserver: ask for a certificate, verify it per request
		// (authn), so that a bad one is a 401 and not a failed handshake.
		// ClientCAs only names the acceptable CAs to the client.
		cfg.ClientAuth = tls.RequestClientCert
		cfg.ClientCAs = s.clientCAs.Pool()
	}
	return cfg
}

// watchFiles adds the serving key pair and client CAs to r; a change of the
// client CAs also reaches au.
func (s *servingOptions) watchFiles(r *certfile.Reloader, au *authn.Authenticator) {
	if s.keyPair != nil {
		r.AddKeyPair("--tls-cert-file/--tls-private-key-file", s.keyPair, nil)
	}
	if s.clientCAs != nil {
		r.AddCAs("--client-ca-file", s.clientCAs, func() {
			au.SetClientCAs(s.clientCAs.Pool())
			if s.keyPair != nil {
				s.tlsCur.Store(s.currentTLS())
			}
		})
	}
}

// authMethods names the configured authenticators for the start log.
func (s *servingOptions) authMethods() []string {
	var m []string
	if s.authn.ClientCAs != nil {
		m = append(m, "x509")
	}
	if s.authn.Tokens != nil {
		m = append(m, fmt.Sprintf("token (%d tokens)", len(s.authn.Tokens)))
	}
	if len(s.saKeys) > 0 {
		m = append(m, fmt.Sprintf("serviceaccount (%d keys, issuers %s)", len(s.saKeys), strings.Join(append([]string{authn.LegacyIssuer}, s.saIssuers...), ",")))
	}
	switch {
	case s.authnKubeconfig != "":
		m = append(m, "tokenreview (--authentication-kubeconfig)")
	case s.authnWebhookConfig != "":
		m = append(m, "tokenreview (--authentication-token-webhook-config-file)")
	}
	if len(m) > 0 && s.anonymousAuth {
		m = append(m, "anonymous")
	}
	return m
}
