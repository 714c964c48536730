package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/hostexec"
	utilexec "k8s.io/utils/exec"
)

// mount-utils decides on blkid's and fsck's exit status, so the adapter must keep it.
func TestBoundExecErrors(t *testing.T) {
	x := boundExec{ctx: context.Background(), x: hostexec.New(DefaultTimeout)}
	out, err := x.Command("sh", "-c", "echo no filesystem; exit 2").CombinedOutput()
	var ee utilexec.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 2 || string(out) != "no filesystem\n" {
		t.Fatalf("exit 2: %q, %v", out, err)
	}
	if strings.Contains(err.Error(), "no filesystem") {
		t.Fatalf("error %q repeats the output mount-utils adds itself", err)
	}
	if _, err := x.Command("monoceph-no-such-fsck").CombinedOutput(); err != utilexec.ErrExecutableNotFound {
		t.Fatalf("missing command: %v, want ErrExecutableNotFound", err)
	}
	if err := x.Command("true").Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := x.LookPath("sh"); err != nil {
		t.Fatal(err)
	}
	if err := x.Command("true").Start(); err == nil {
		t.Fatal("Start should report that streaming is unsupported")
	}
}
