package kms

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// cleanClient is an HTTP client of its own (no proxy from the environment, no redirects) over
// the shared transport of conf's address and TLS settings.
func cleanClient(conf *vaultConf) *http.Client {
	return &http.Client{Transport: noRedirects{sharedTransport(conf)}, Timeout: VaultTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// transportKey is what a transport depends on.
type transportKey struct {
	address, tlsServerName string
	skipVerify             bool
}

// transports are the Vault transports, one per address and TLS settings: a transport per call
// kept its idle connections (and their two goroutines each) for IdleConnTimeout after every
// CreateVolume or NodeStageVolume.
var transports struct {
	sync.Mutex
	m map[transportKey]*http.Transport
}

func sharedTransport(conf *vaultConf) *http.Transport {
	k := transportKey{address: conf.address, tlsServerName: conf.tlsServerName, skipVerify: conf.skipVerify}
	transports.Lock()
	defer transports.Unlock()
	if tr := transports.m[k]; tr != nil {
		return tr
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: VaultTimeout}).DialContext,
		TLSHandshakeTimeout: VaultTimeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, ServerName: conf.tlsServerName,
			InsecureSkipVerify: conf.skipVerify}, //nolint:gosec // the operator's vaultCAVerify: "false"
	}
	if transports.m == nil {
		transports.m = map[transportKey]*http.Transport{}
	}
	transports.m[k] = tr
	return tr
}

// errRedirect: Vault answered with a redirect, which monoceph does not follow.
var errRedirect = errors.New("redirect refused")

// noRedirects turns every 3xx answer into an error. A redirect (a standby's 307 to the active
// node, or anything between) would send the token and the request's body, a DEK, to another
// host, possibly in the clear; and not followed, the vault client takes a 3xx for a success.
type noRedirects struct{ rt http.RoundTripper }

func (n noRedirects) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := n.rt.RoundTrip(req)
	if err != nil || resp.StatusCode < 300 || resp.StatusCode > 399 {
		return resp, err
	}
	_ = resp.Body.Close()
	return nil, fmt.Errorf("%w: %w: Vault answered HTTP %d (to %q): set %s to the address that answers itself (the active node)",
		ErrConfig, errRedirect, resp.StatusCode, resp.Header.Get("Location"), vaultAddressKey)
}
