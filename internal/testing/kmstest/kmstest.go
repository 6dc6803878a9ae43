// Package kmstest is a KMS v2 plugin for tests and benchmarks: a gRPC
// server on a Unix socket speaking k8s.io/kms's v2 API (through
// k8s.io/kms/pkg/service), encrypting DEK seeds with AES-GCM under a key
// named by its key ID. It counts its calls and can be stopped, restarted
// and given a new key ID.
package kmstest

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	kmsapi "k8s.io/kms/apis/v2"
	"k8s.io/kms/pkg/service"
)

// Plugin is a running (or stopped) test KMS v2 plugin. It is safe for
// concurrent use.
type Plugin struct {
	socket string

	mu    sync.Mutex
	keyID string       // guarded by mu
	srv   *grpc.Server // guarded by mu; nil when stopped
	done  chan error   // guarded by mu

	// Calls counted since start (also across restarts).
	DecryptCalls, EncryptCalls, StatusCalls atomic.Int64
}

var _ service.Service = (*Plugin)(nil)

// Start serves a plugin with key ID keyID on the Unix socket path socket
// (its endpoint is "unix://" + socket).
func Start(socket, keyID string) (*Plugin, error) {
	p := &Plugin{socket: socket, keyID: keyID}
	if err := p.Restart(); err != nil {
		return nil, err
	}
	return p, nil
}

// Endpoint is the plugin's endpoint for an EncryptionConfiguration.
func (p *Plugin) Endpoint() string { return "unix://" + p.socket }

// SetKeyID changes the key new DEK seeds are encrypted with; seeds
// encrypted with earlier key IDs still decrypt (a rotation).
func (p *Plugin) SetKeyID(id string) {
	p.mu.Lock()
	p.keyID = id
	p.mu.Unlock()
}

// Stop closes the socket and every connection (the plugin is down).
func (p *Plugin) Stop() {
	p.mu.Lock()
	srv, done := p.srv, p.done
	p.srv, p.done = nil, nil
	p.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	<-done
	_ = os.Remove(p.socket)
}

// Restart starts serving again after Stop (no-op while serving).
func (p *Plugin) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		return nil
	}
	_ = os.Remove(p.socket)
	ln, err := net.Listen("unix", p.socket)
	if err != nil {
		return fmt.Errorf("kmstest: cannot listen on %s: %w", p.socket, err)
	}
	srv := grpc.NewServer()
	kmsapi.RegisterKeyManagementServiceServer(srv, service.NewGRPCService(p.socket, 5*time.Second, p))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	p.srv, p.done = srv, done
	return nil
}

// aead is the AES-GCM cipher of a key ID: its key is SHA-256 of the ID, so
// a restarted plugin (or another Plugin) decrypts what an earlier one
// encrypted.
func aead(keyID string) (cipher.AEAD, error) {
	k := sha256.Sum256([]byte("kmstest:" + keyID))
	b, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// Encrypt implements service.Service.
func (p *Plugin) Encrypt(_ context.Context, _ string, data []byte) (*service.EncryptResponse, error) {
	p.EncryptCalls.Add(1)
	p.mu.Lock()
	id := p.keyID
	p.mu.Unlock()
	g, err := aead(id)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, g.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return &service.EncryptResponse{Ciphertext: g.Seal(nonce, nonce, data, []byte(id)), KeyID: id}, nil
}

// Decrypt implements service.Service.
func (p *Plugin) Decrypt(_ context.Context, _ string, req *service.DecryptRequest) ([]byte, error) {
	p.DecryptCalls.Add(1)
	g, err := aead(req.KeyID)
	if err != nil {
		return nil, err
	}
	if len(req.Ciphertext) < g.NonceSize() {
		return nil, errors.New("kmstest: ciphertext too short")
	}
	n := g.NonceSize()
	return g.Open(nil, req.Ciphertext[:n], req.Ciphertext[n:], []byte(req.KeyID))
}

// Status implements service.Service.
func (p *Plugin) Status(context.Context) (*service.StatusResponse, error) {
	p.StatusCalls.Add(1)
	p.mu.Lock()
	id := p.keyID
	p.mu.Unlock()
	return &service.StatusResponse{Version: "v2", Healthz: "ok", KeyID: id}, nil
}
