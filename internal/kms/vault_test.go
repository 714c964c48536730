package kms

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"syscall"
	"testing"

	vault "github.com/hashicorp/vault/api"
)

func TestVaultClassify(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want error
		text string
	}{
		{"token refused", &vault.ResponseError{StatusCode: 403, Errors: []string{"permission denied"}}, ErrDenied, "permission denied"},
		{"sealed", &vault.ResponseError{StatusCode: 503, Errors: []string{"Vault is sealed"}}, ErrUnavailable, "Vault is sealed"},
		{"rate limited", &vault.ResponseError{StatusCode: 429}, ErrUnavailable, "HTTP 429"},
		{"refused connection", &url.Error{Op: "Get", URL: "http://127.0.0.1:1", Err: syscall.ECONNREFUSED}, ErrUnavailable, "connection refused"},
		{"deadline", context.DeadlineExceeded, ErrUnavailable, "deadline"},
		{"bad request", &vault.ResponseError{StatusCode: 400, Errors: []string{"no such key"}}, nil, "HTTP 400: no such key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := classify("op", tt.err)
			for _, e := range []error{ErrDenied, ErrUnavailable} {
				if errors.Is(err, e) != (e == tt.want) {
					t.Fatalf("classify = %v; is %v: %v, want %v", err, e, errors.Is(err, e), e == tt.want)
				}
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("classify = %v, want it to say %q", err, tt.text)
			}
		})
	}
}
