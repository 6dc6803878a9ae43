package authn

import (
	"bytes"
	"crypto/x509"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Tokens maps a bearer token to its user. It is read-only once built.
type Tokens map[string]*User

// LoadTokenFile reads a kube-apiserver --token-auth-file.
func LoadTokenFile(path string) (Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read token file: %w", err)
	}
	return ParseTokens(b, path)
}

// ParseTokens parses a token file in kube-apiserver's format: CSV records
// token,user,uid[,"group1,group2"], extra columns ignored. As
// kube-apiserver, a record with an empty token is skipped and a duplicate
// token keeps its last record. Errors name the file (name) and the line;
// they never contain a token.
func ParseTokens(b []byte, name string) (Tokens, error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	tokens := Tokens{}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return tokens, nil
		}
		if err != nil {
			// csv.ParseError carries line and column but also no data.
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("cannot parse token file %s: line %d, column %d: %w", name, pe.Line, pe.Column, pe.Err)
			}
			return nil, fmt.Errorf("cannot parse token file %s: %w", name, err)
		}
		if len(rec) < 3 {
			line, _ := r.FieldPos(0)
			return nil, fmt.Errorf("cannot parse token file %s: line %d: must have at least 3 columns (token, user name, user uid), found %d", name, line, len(rec))
		}
		if rec[0] == "" {
			continue
		}
		u := &User{Name: rec[1], UID: rec[2], Method: "token"}
		if len(rec) >= 4 {
			u.Groups = strings.Split(rec[3], ",")
		}
		tokens[rec[0]] = u
	}
}

// LoadClientCAFile reads a PEM bundle of client CAs (--client-ca-file).
func LoadClientCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read client CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("cannot use client CA file %s: no PEM certificate found", path)
	}
	return pool, nil
}
