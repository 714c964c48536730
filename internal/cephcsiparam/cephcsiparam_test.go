package cephcsiparam

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCheck(t *testing.T) {
	keys := Keys{
		"imageFormat":                 OnlyValue("2", "image format"),
		"encrypted":                   NotTrue("encryption"),
		"mkfsOptions":                 Empty("custom mkfs options"),
		"volumeNamePrefix":            Refused("volume name prefixes"),
		"csi.storage.k8s.io/whatever": Ignored,
	}
	for _, c := range []struct {
		name string
		p    map[string]string
		want string // "" for no error
	}{
		{name: "agreeing values", p: map[string]string{"imageFormat": "2", "encrypted": "false", "mkfsOptions": "", "csi.storage.k8s.io/whatever": "x", "other": "y"}},
		{name: "another value", p: map[string]string{"imageFormat": "1"},
			want: `parameters["imageFormat"]: "1": image format is not supported by monoceph (only "2")`},
		{name: "true", p: map[string]string{"encrypted": "true"}, want: `parameters["encrypted"]: "true": encryption is not supported by monoceph`},
		{name: "not a boolean", p: map[string]string{"encrypted": "yes"}, want: `parameters["encrypted"]: "yes": want true or false`},
		{name: "not empty", p: map[string]string{"mkfsOptions": "-m0"}, want: `parameters["mkfsOptions"]: "-m0": custom mkfs options are not supported by monoceph`},
		{name: "refused whatever its value", p: map[string]string{"volumeNamePrefix": ""}, want: `parameters["volumeNamePrefix"]: "": volume name prefixes are not supported by monoceph`},
		{name: "the first bad key in order", p: map[string]string{"volumeNamePrefix": "x", "encrypted": "true"},
			want: `parameters["encrypted"]: "true": encryption is not supported by monoceph`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.p, keys)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != c.want {
				t.Fatalf("err = %v, want INVALID_ARGUMENT %q", err, c.want)
			}
		})
	}
	if got := keys.Keys(); len(got) != 5 || got[0] != "csi.storage.k8s.io/whatever" || got[4] != "volumeNamePrefix" {
		t.Errorf("Keys() = %v, want the 5 keys sorted", got)
	}
}
