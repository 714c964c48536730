package kms

import (
	"context"
	"fmt"
	"slices"
	"strings"

	vault "github.com/hashicorp/vault/api"
)

// Check asks Vault whether it is unsealed, takes the token and lets it do what the provider
// will (sys/capabilities-self: create and update of a KV secret, transit encrypt and decrypt;
// ErrDenied naming the path), and with transit whether the key exists (ErrInvalid naming
// vaultTransitKey, when the token may read it), before a caller writes anything that would need
// Vault next.
func (v *Vault) Check(ctx context.Context) error {
	if err := v.reachable(ctx); err != nil {
		return err
	}
	if v.typ == TypeVaultTokens {
		// the volume's ID is not known yet: a probe name stands for it (policies grant
		// <mount>/data/* or a prefix of it)
		return v.can(ctx, v.conf.path+"/data/"+capabilityProbe, "create", "update")
	}
	for _, op := range []string{"encrypt", "decrypt"} {
		if err := v.can(ctx, v.conf.path+"/"+op+"/"+v.conf.transitKey, "update"); err != nil {
			return err
		}
	}
	keyPath := v.conf.path + "/keys/" + v.conf.transitKey
	if v.can(ctx, keyPath, "read") != nil {
		return nil // the key's existence shows at the first encrypt (the policy need not grant read)
	}
	key, err := call(ctx, "read the transit key", func(ctx context.Context) (*vault.Secret, error) {
		return v.client.Logical().ReadWithContext(ctx, keyPath)
	})
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("%w: Vault has no transit key %s (%s %q, %s %q)", ErrInvalid, keyPath,
			vaultTransitKeyKey, v.conf.transitKey, vaultBackendPathKey, v.conf.path)
	}
	return nil
}

// CheckRemove asks Vault whether Remove of volumeID's DEK would succeed (unsealed, the token
// taken and allowed to delete it), before a caller destroys what the DEK opens: a volume
// deleted with a token that cannot delete its DEK would leave the DEK behind for good. No-op
// with transit.
func (v *Vault) CheckRemove(ctx context.Context, volumeID string) error {
	if v.typ != TypeVaultTokens {
		return nil
	}
	if err := v.reachable(ctx); err != nil {
		return err
	}
	return v.can(ctx, v.removePath(volumeID), "delete")
}

// removePath is the path Remove deletes: the metadata (every version) or the latest version.
func (v *Vault) removePath(volumeID string) string {
	if v.conf.destroy {
		return v.conf.path + "/metadata/" + volumeID
	}
	return v.conf.path + "/data/" + volumeID
}

// reachable: Vault is unsealed and takes the token.
func (v *Vault) reachable(ctx context.Context) error {
	h, err := call(ctx, "health", func(ctx context.Context) (*vault.HealthResponse, error) {
		return v.client.Sys().HealthWithContext(ctx)
	})
	if err != nil {
		return err
	}
	if !h.Initialized || h.Sealed {
		return fmt.Errorf("%w: Vault at %s is sealed or not initialised", ErrUnavailable, v.conf.address)
	}
	_, err = call(ctx, "token lookup", func(ctx context.Context) (*vault.Secret, error) {
		return v.client.Auth().Token().LookupSelfWithContext(ctx)
	})
	return err
}

// capabilityProbe is the KV secret name whose capabilities Check asks for.
const capabilityProbe = "monoceph-capability-probe"

// can returns ErrDenied unless the token has every one of caps on path.
func (v *Vault) can(ctx context.Context, path string, caps ...string) error {
	got, err := call(ctx, "capabilities of "+path, func(ctx context.Context) ([]string, error) {
		return v.client.Sys().CapabilitiesSelfWithContext(ctx, path)
	})
	if err != nil {
		return err
	}
	if slices.Contains(got, "root") {
		return nil
	}
	var missing []string
	for _, c := range caps {
		if !slices.Contains(got, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the token's policies do not grant %s on %s (they grant %v)", ErrDenied,
			strings.Join(missing, ", "), path, got)
	}
	return nil
}
