package snapmeta

import (
	"context"
	"encoding/base64"
	"io"
	"strings"
	"testing"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/monoceph/monoceph/internal/logtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// jwtHeader starts every service account token (base64 of `{"alg":`).
const jwtHeader = "eyJhbGci"

// TestNoSecretInLogsOnSnapshotMetadataPath runs the Kubernetes-facing SnapshotMetadata path
// (TokenReview, SubjectAccessReview, the snapshotter Secret, the Ceph connection, and the
// changed-blocks client's TokenRequest) at -v=10: neither a token nor the Ceph key may reach
// the log. client-go logs bodies from -v=8 on, so the test first proves that this very capture
// sees them when nothing caps client-go.
func TestNoSecretInLogsOnSnapshotMetadataPath(t *testing.T) {
	logs := logtest.Capture(t, 10) // before the clients are built: client-go decides some wrappers then
	k := newKubeEnv(t)
	h := newHistory(t, k.env)
	k.volumeSnapshot(t, "s1", h.s1.String(), testDriver, true)
	k.volumeSnapshot(t, "s3", h.s3.String(), testDriver, true)
	// tokens made by the test's own (uncapped) client: before the capture is examined
	good, foreign, nobody := k.token(t, "backup", testAudience), k.token(t, "backup", "someone-else"), k.token(t, "nobody", testAudience)
	key := k.cl.Admin.Key()
	// the Secret's data is the key itself in a protobuf body, its base64 in a JSON one
	secrets := []string{key, good, jwtHeader, foreign, nobody, base64.StdEncoding.EncodeToString([]byte(key))}

	// control: client-go, uncapped, logs the Secret's data and the reviewed token
	logs.Reset()
	ctx := klog.NewContext(context.Background(), klog.Background())
	if _, err := k.kc.CoreV1().Secrets("monoceph").Get(ctx, "ceph-snapshotter", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.kc.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: good}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if leaks := logtest.Leaks(logs.String(), secrets[:3]...); len(leaks) != 3 {
		t.Fatalf("the control run leaked only %q of the secrets: the capture does not see client-go's bodies", leaks)
	}

	logs.Reset()
	client := k.client(t)
	drain := func(recv func() error) error {
		var err error
		for err == nil {
			err = recv()
		}
		if err == io.EOF {
			return nil
		}
		return err
	}
	for _, c := range []struct {
		name  string
		token string
		base  string
		want  codes.Code
	}{
		{name: "allocated", token: good, want: codes.OK},
		{name: "delta", token: good, base: h.s1.String(), want: codes.OK},
		{name: "token for another audience", token: foreign, want: codes.Unauthenticated},
		{name: "caller without RBAC", token: nobody, base: h.s1.String(), want: codes.PermissionDenied},
	} {
		ctx := context.Background()
		var err error
		if c.base == "" {
			st, serr := client.GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{SecurityToken: c.token, Namespace: backupNS, SnapshotName: "s3"})
			err = serr
			if err == nil {
				err = drain(func() error { _, err := st.Recv(); return err })
			}
		} else {
			st, serr := client.GetMetadataDelta(ctx, &api.GetMetadataDeltaRequest{SecurityToken: c.token, Namespace: backupNS, BaseSnapshotId: c.base, TargetSnapshotName: "s3"})
			err = serr
			if err == nil {
				err = drain(func() error { _, err := st.Recv(); return err })
			}
		}
		if status.Code(err) != c.want {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// the operators' client: a TokenRequest, then the same stream
	if err := ChangedBlocks(context.Background(), k.cp.Admin, ChangedBlocksArgs{Namespace: backupNS, Snapshot: "s3",
		BaseSnapshot: "s1", ServiceAccount: backupNS + "/backup"}, io.Discard); err != nil {
		t.Fatal(err)
	}

	out := logs.String()
	// the log really holds the calls at the highest verbosity, so the check below is not vacuous
	for _, want := range []string{".SnapshotMetadata/GetMetadataAllocated", ".SnapshotMetadata/GetMetadataDelta",
		`\"security_token\":\"***stripped***\"`, "RPC failed", "Snapshot metadata sent"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if leaks := logtest.Leaks(out, secrets...); len(leaks) > 0 {
		t.Errorf("secrets in the log: %q", leaks)
	}
	if t.Failed() {
		t.Logf("log:\n%s", out)
	}
}
