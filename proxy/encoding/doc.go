// Package encoding owns what a response looks like on the wire: content
// negotiation and the encoders.
//
//   - Negotiation (Negotiate, ErrorFormat, ParseAccept): an Accept
//     header read as kube-apiserver reads it, into an Output (a Format:
//     JSON, protobuf or YAML, and a Target: the objects, a Table or
//     PartialObjectMetadata), or 406.
//   - Encoders (Encoder, NewEncoder): a request negotiates its
//     representation once and gets the encoder of that Output; GET, the
//     LIST loop and the watch loop then call the encoder and never look
//     at the format again (as kube-apiserver's serveWatchHandler picks
//     its Encoder and Framer once). An encoder knows a list's head, items
//     and tail (and its ListLayout), one object, a watch stream's frames
//     and a Status (AppendStatus for an error). A resource served at a
//     version other than its stored one is converted by the encoder.
//   - What the rendering cache may reuse of an encoder's output
//     (CachedJSON), chosen by NewEncoder.
//
// It writes bytes with package codec and reads nothing else: package
// proxy negotiates through it, holds one Encoder per request and owns
// the rendering cache, the frame cache and the writers.
//
// Adding a format (say CBOR) is a Format constant and its media type in
// negotiate.go, one encoder type in encoder.go with its tests, and its
// case in NewEncoder.
package encoding
