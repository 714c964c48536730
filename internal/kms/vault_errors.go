package kms

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	vault "github.com/hashicorp/vault/api"
)

// Errors of a Vault provider.
var (
	// ErrUnavailable: the KMS is unreachable, sealed or overloaded (UNAVAILABLE: retry).
	ErrUnavailable = errors.New("KMS unavailable")
	// ErrDenied: the KMS refused the token of the secrets.
	ErrDenied = errors.New("KMS refused the token")
	// ErrMissingToken: the secrets have no Vault token.
	ErrMissingToken = errors.New("missing " + VaultTokenKey + " (the Vault token) in the secrets")
	// ErrConfig: the KMS configuration (or the driver's environment) is wrong
	// (FAILED_PRECONDITION: no retry helps until the operator changes it).
	ErrConfig = errors.New("KMS misconfigured")
	// ErrInvalid: the KMS entry names something the KMS does not have (INVALID_ARGUMENT).
	ErrInvalid = errors.New("KMS entry invalid")
	// ErrNoDEK: the KMS has no key for the volume.
	ErrNoDEK = errors.New("the KMS has no key for the volume")
)

// call runs fn with a context bounded by VaultTimeout and classifies its error.
func call[T any](ctx context.Context, what string, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, VaultTimeout)
	defer cancel()
	out, err := fn(ctx)
	if err != nil {
		return out, classify(what, err)
	}
	return out, nil
}

// classify wraps err with ErrUnavailable (retry later) or ErrDenied (fix the token); the text
// keeps Vault's own reason (never the token: the client does not put it in errors).
func classify(what string, err error) error {
	var re *vault.ResponseError
	if errors.As(err, &re) {
		switch {
		case re.StatusCode == http.StatusForbidden || re.StatusCode == http.StatusUnauthorized:
			return fmt.Errorf("%w: Vault %s: %v", ErrDenied, what, strings.Join(re.Errors, "; "))
		case re.StatusCode == http.StatusTooManyRequests || re.StatusCode >= 500:
			return fmt.Errorf("%w: Vault %s: HTTP %d: %v", ErrUnavailable, what, re.StatusCode, strings.Join(re.Errors, "; "))
		}
		return fmt.Errorf("vault %s: HTTP %d: %v", what, re.StatusCode, strings.Join(re.Errors, "; "))
	}
	if errors.Is(err, ErrConfig) {
		return fmt.Errorf("vault %s: %w", what, err)
	}
	var ne net.Error
	var ue *url.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) || errors.As(err, &ue) {
		return fmt.Errorf("%w: Vault %s: %v", ErrUnavailable, what, err)
	}
	return fmt.Errorf("vault %s: %w", what, err)
}
