package proxy

import (
	"net"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/valyala/fasthttp"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	kaudit "k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/lazyapi/lazyapi/audit"
	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
	"github.com/lazyapi/lazyapi/proxy/request"
)

// Audit events (Config.Audit, --audit-log-path). handle starts a request's
// record (auditRequest), authenticate and authorize add the requestor and
// the decision to it (auditAuthenticated, auditAuthorized), and the
// deferred end builds the audit.k8s.io/v1 Event kube-apiserver would log at
// level Metadata and hands it to the audit log, which writes it in the
// background. Nothing secret is in an event: no header but the user agent,
// no body.

// auditKey is the fasthttp user value holding a request's *auditRecord.
const auditKey = "lazyapi.audit"

// auditRecord is what a request's event needs beyond the request itself.
type auditRecord struct {
	received       time.Time
	id             string // the Audit-Id: the client's (auditID) or a new one
	path, rawQuery string
	requestor      *authn.User // nil: not authenticated (failed, or authentication off)
	attrs          authz.Attributes
	authzRan       bool   // attrs, decision and reason are set
	decision       string // authorization.k8s.io/decision: allow, forbid, or "" (an error)
	reason         string
	message        string // a 403's Status message

	// A watch's end (auditWatchEnd) may come before auditEnd (a watch
	// refused before its stream) or after it (the stream's end); mu
	// orders them.
	mu      sync.Mutex
	ended   bool           // the watch ended
	started *auditv1.Event // the ResponseStarted event sent; its ResponseComplete is due
	cfg     kaudit.RequestAuditConfig
}

// Annotation keys and values kube-apiserver's authorization filter adds.
const (
	decisionAnnotation = "authorization.k8s.io/decision"
	reasonAnnotation   = "authorization.k8s.io/reason"
)

// maxUserAgent is kube-apiserver's maxUserAgentLength: a longer user agent
// is cut and marked.
const maxUserAgent = 1024

// maxSourceIPs bounds an event's sourceIPs (X-Forwarded-For entries, then
// X-Real-Ip, then the peer): a client cannot make an event as large as its
// headers.
const maxSourceIPs = 16

func noAudit() {}

// auditRequest starts rc's audit record and returns the function that
// logs its event when the response is written (handle defers it); without
// Config.Audit it does nothing.
func (s *Server) auditRequest(rc *fasthttp.RequestCtx, path, rawQuery string) func() {
	if s.cfg.Audit == nil {
		return noAudit
	}
	r := &auditRecord{received: time.Now(), id: auditID(rc), path: path, rawQuery: rawQuery}
	rc.SetUserValue(auditKey, r)
	if publicPath(path) {
		// Not authenticated here: received as it is.
		s.auditReceived(rc, r)
	}
	return func() { s.auditEnd(rc, path, rawQuery, r) }
}

// auditAuthenticated records the authenticated requestor (before any
// impersonation) and logs the request's RequestReceived event.
func (s *Server) auditAuthenticated(rc *fasthttp.RequestCtx, u *authn.User) {
	if r, ok := rc.UserValue(auditKey).(*auditRecord); ok {
		r.requestor = u
		s.auditReceived(rc, r)
	}
}

// auditReceived logs r's RequestReceived event unless the policy omits
// it: kube-apiserver's audit filter logs it once the request is
// authenticated (a failed authentication has none), before impersonation
// and authorization, so it names the requestor, no impersonated user, no
// decision and no response.
func (s *Server) auditReceived(rc *fasthttp.RequestCtx, r *auditRecord) {
	var a authz.Attributes
	var ri RequestInfo
	request.Resolve(&ri, bytesutil.ToUnsafeString(rc.Method()), r.path, r.rawQuery)
	ri.Attributes(&a)
	if audit.Omitted(s.cfg.Audit.Evaluate(policyAttributes(&a, r.requestor)), auditv1.StageRequestReceived) {
		return
	}
	ev := &auditv1.Event{
		Level: auditv1.LevelMetadata, AuditID: types.UID(r.id), Stage: auditv1.StageRequestReceived,
		RequestURI: string(rc.RequestURI()), Verb: a.Verb, SourceIPs: sourceIPs(rc), UserAgent: userAgent(rc),
		ObjectRef:                objectRef(&a),
		RequestReceivedTimestamp: metav1.NewMicroTime(r.received), StageTimestamp: metav1.NewMicroTime(time.Now()),
	}
	if r.requestor != nil {
		ev.User = userInfo(r.requestor)
	}
	s.cfg.Audit.Emit(ev)
}

// policyAttributes are the attributes the audit policy sees: a's, with
// the requestor (nil: not authenticated) as kube-apiserver's audit filter
// (which runs before impersonation).
func policyAttributes(a *authz.Attributes, requestor *authn.User) *authorizer.AttributesRecord {
	pa := &authorizer.AttributesRecord{
		Verb: a.Verb, Namespace: a.Namespace, APIGroup: a.APIGroup, APIVersion: a.APIVersion,
		Resource: a.Resource, Subresource: a.Subresource, Name: a.Name,
		ResourceRequest: a.ResourceRequest, Path: a.Path,
	}
	if requestor != nil {
		pa.User = &user.DefaultInfo{Name: requestor.Name, UID: requestor.UID, Groups: requestor.Groups, Extra: requestor.Extra}
	}
	return pa
}

// objectRef is the event's objectRef of a resource request (nil for
// others).
func objectRef(a *authz.Attributes) *auditv1.ObjectReference {
	if !a.ResourceRequest {
		return nil
	}
	return &auditv1.ObjectReference{
		Resource: a.Resource, Namespace: a.Namespace, Name: a.Name,
		APIGroup: a.APIGroup, APIVersion: a.APIVersion, Subresource: a.Subresource,
	}
}

// auditAuthorized records authorize's attributes and decision.
func (s *Server) auditAuthorized(rc *fasthttp.RequestCtx, a *authz.Attributes, allowed bool, reason string, err error) {
	r, ok := rc.UserValue(auditKey).(*auditRecord)
	if !ok {
		return
	}
	r.attrs, r.authzRan, r.reason = *a, true, reason
	switch {
	case allowed:
		r.decision = "allow"
	case err != nil:
		r.reason = "internal error" // kube-apiserver's reasonError
	default:
		r.decision = "forbid"
		r.message = authz.ForbiddenMessage(a, reason)
	}
}

// auditEnd builds and emits rc's event, unless the policy's level for it
// is None or omits its stage.
func (s *Server) auditEnd(rc *fasthttp.RequestCtx, path, rawQuery string, r *auditRecord) {
	code := rc.Response.StatusCode()
	a := r.attrs
	if !r.authzRan {
		// Not authorized (public paths, 401s): the attributes as
		// authorization would have seen them.
		var ri RequestInfo
		request.Resolve(&ri, bytesutil.ToUnsafeString(rc.Method()), path, rawQuery)
		ri.Attributes(&a)
	}
	cfg := s.cfg.Audit.Evaluate(policyAttributes(&a, r.requestor))
	// A failed authentication and a watch are logged when their response
	// starts (kube-apiserver: WithFailedAuthenticationAudit, and a
	// long-running request's ResponseStarted); a watch's ResponseComplete
	// when its stream ends, or now when it was refused or has ended: as
	// kube-apiserver, a watch has both, whatever its code.
	stage := auditv1.StageResponseComplete
	failedAuthn := code == fasthttp.StatusUnauthorized && r.requestor == nil
	r.mu.Lock()
	defer r.mu.Unlock()
	watching := a.Verb == "watch" && code == fasthttp.StatusOK && !r.ended
	if failedAuthn || watching {
		stage = auditv1.StageResponseStarted
	}
	id := r.id
	rc.Response.Header.Set("Audit-Id", id)
	if audit.Omitted(cfg, stage) && !(watching && !audit.Omitted(cfg, auditv1.StageResponseComplete)) {
		return
	}
	ev := auditEvent(rc, r, &a, id, stage, failedAuthn)
	if watching {
		// The watch's ResponseComplete is logged when its stream ends
		// (auditWatchEnd), from a copy of this event.
		c := *ev
		r.started, r.cfg = &c, cfg
	}
	if a.Verb == "watch" && !watching && !failedAuthn && !audit.Omitted(cfg, auditv1.StageResponseStarted) {
		c := *ev
		c.Stage = auditv1.StageResponseStarted
		s.cfg.Audit.Emit(&c)
	}
	if !audit.Omitted(cfg, stage) {
		s.cfg.Audit.Emit(ev)
	}
}

// auditEvent is the event of rc at stage (r's record, a its attributes,
// id its Audit-Id): who, what, the response status (with a refusal's
// message) and the authorization's annotations. r.mu is held.
func auditEvent(rc *fasthttp.RequestCtx, r *auditRecord, a *authz.Attributes, id string, stage auditv1.Stage, failedAuthn bool) *auditv1.Event {
	code := rc.Response.StatusCode()
	ev := &auditv1.Event{
		Level:                    auditv1.LevelMetadata,
		AuditID:                  types.UID(id),
		Stage:                    stage,
		RequestURI:               string(rc.RequestURI()),
		Verb:                     a.Verb,
		SourceIPs:                sourceIPs(rc),
		UserAgent:                userAgent(rc),
		ResponseStatus:           &metav1.Status{Code: int32(code)},
		RequestReceivedTimestamp: metav1.NewMicroTime(r.received),
		StageTimestamp:           metav1.NewMicroTime(time.Now()),
	}
	if r.requestor != nil {
		ev.User = userInfo(r.requestor)
		if u, ok := rc.UserValue(userKey).(*authn.User); ok && u != r.requestor {
			iu := userInfo(u)
			ev.ImpersonatedUser = &iu
		}
	}
	ev.ObjectRef = objectRef(a)
	if code >= 400 {
		st := ev.ResponseStatus
		st.Status, st.Reason = metav1.StatusFailure, metav1.StatusReason(reasonForCode(code))
		switch {
		case failedAuthn:
			st.Message = authMethods(rc)
		case code == fasthttp.StatusForbidden && r.decision == "forbid":
			st.Message = r.message
		}
	}
	if r.authzRan {
		ev.Annotations = map[string]string{reasonAnnotation: r.reason}
		if r.decision != "" {
			ev.Annotations[decisionAnnotation] = r.decision
		}
	}
	return ev
}

// auditWatchEnd returns the function a watch calls when it ends (its
// releases): it logs the watch's ResponseComplete event.
func (s *Server) auditWatchEnd(rc *fasthttp.RequestCtx) func() {
	r, ok := rc.UserValue(auditKey).(*auditRecord)
	if !ok {
		return noAudit
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ended = true
		if r.started == nil || audit.Omitted(r.cfg, auditv1.StageResponseComplete) {
			return
		}
		ev := r.started
		r.started = nil
		ev.Stage, ev.StageTimestamp = auditv1.StageResponseComplete, metav1.NewMicroTime(time.Now())
		s.cfg.Audit.Emit(ev)
	}
}

// auditID is the request's Audit-ID header when it is a plausible ID (as
// kube-apiserver, which takes the client's), else a new UUID.
func auditID(rc *fasthttp.RequestCtx) string {
	if id := rc.Request.Header.Peek("Audit-Id"); len(id) > 0 && len(id) <= 64 && plainToken(id) {
		return string(id)
	}
	return uuid.NewString()
}

// plainToken reports whether b is letters, digits, '-', '_' and '.'.
func plainToken(b []byte) bool {
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func userInfo(u *authn.User) authnv1.UserInfo {
	ui := authnv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		ui.Extra = make(map[string]authnv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			ui.Extra[k] = authnv1.ExtraValue(v)
		}
	}
	return ui
}

// userAgent is the request's User-Agent, cut as kube-apiserver cuts it.
func userAgent(rc *fasthttp.RequestCtx) string {
	ua := rc.Request.Header.UserAgent()
	if len(ua) > maxUserAgent {
		return string(ua[:maxUserAgent]) + "...TRUNCATED"
	}
	return string(ua)
}

// sourceIPs is kube-apiserver's utilnet.SourceIPs: the X-Forwarded-For
// addresses, X-Real-Ip, then the peer's address (unless it is already
// last), at most maxSourceIPs.
func sourceIPs(rc *fasthttp.RequestCtx) []string {
	var ips []string
	add := func(s string) {
		if ip := net.ParseIP(strings.TrimSpace(s)); ip != nil && len(ips) < maxSourceIPs-1 {
			ips = append(ips, ip.String())
		}
	}
	if xff := rc.Request.Header.Peek("X-Forwarded-For"); len(xff) > 0 {
		for _, s := range strings.Split(string(xff), ",") {
			add(s)
		}
	}
	if xri := rc.Request.Header.Peek("X-Real-Ip"); len(xri) > 0 {
		add(string(xri))
	}
	peer := rc.RemoteIP().String()
	if len(ips) == 0 || ips[len(ips)-1] != peer {
		ips = append(ips, peer)
	}
	return ips
}

// authMethods is kube-apiserver's message for a failed authentication:
// the credential kinds the request carried.
func authMethods(rc *fasthttp.RequestCtx) string {
	var m []string
	if auth := strings.Fields(string(rc.Request.Header.Peek("Authorization"))); len(auth) > 1 {
		switch strings.ToLower(auth[0]) {
		case "basic":
			m = append(m, "basic")
		case "bearer":
			m = append(m, "bearer")
		}
	}
	if c, ok := rc.Conn().(connState); ok && len(c.ConnectionState().PeerCertificates) > 0 {
		m = append(m, "x509")
	}
	if len(m) > 0 {
		return "Authentication failed, attempted: " + strings.Join(m, ", ")
	}
	return "Authentication failed, no credentials provided"
}

// reasonForCode is the Status reason of an error code.
func reasonForCode(code int) string {
	switch code {
	case 401:
		return string(metav1.StatusReasonUnauthorized)
	case 403:
		return string(metav1.StatusReasonForbidden)
	case 404:
		return string(metav1.StatusReasonNotFound)
	case 405:
		return string(metav1.StatusReasonMethodNotAllowed)
	case 406:
		return string(metav1.StatusReasonNotAcceptable)
	case 429:
		return string(metav1.StatusReasonTooManyRequests)
	case 500:
		return string(metav1.StatusReasonInternalError)
	case 503:
		return string(metav1.StatusReasonServiceUnavailable)
	case 504:
		return string(metav1.StatusReasonTimeout)
	}
	if code == 400 {
		return string(metav1.StatusReasonBadRequest)
	}
	return string(metav1.StatusReasonUnknown)
}
