package snapmeta

import (
	"context"
	"fmt"
	"slices"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"github.com/monoceph/monoceph/internal/kubelog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Kube is what the Kubernetes-facing service asks the API server: who a token is, what it may
// do, and which CSI snapshot a VolumeSnapshot is.
type Kube interface {
	// Authenticate reviews a token for the audience and returns its user.
	Authenticate(ctx context.Context, token string) (authnv1.UserInfo, error)
	// Authorize checks that user may get VolumeSnapshots in namespace.
	Authorize(ctx context.Context, user authnv1.UserInfo, namespace string) error
	// Snapshot resolves a VolumeSnapshot to its CSI snapshot ID and the secrets to read it.
	Snapshot(ctx context.Context, namespace, name string) (handle string, secrets map[string]string, err error)
}

// APIServer implements Kube with client-go.
type APIServer struct {
	Client    kubernetes.Interface
	Snapshots snapclient.Interface
	// Audience is what tokens must be issued for (the SnapshotMetadataService's spec.audience).
	Audience string
	// Driver is this driver's name: VolumeSnapshotContents of other drivers are not ours.
	Driver string
}

var _ Kube = (*APIServer)(nil)

func (k *APIServer) Authenticate(ctx context.Context, token string) (authnv1.UserInfo, error) {
	ctx = kubelog.Context(ctx) // the request and response bodies hold the token
	if token == "" {
		return authnv1.UserInfo{}, status.Error(codes.Unauthenticated, "security_token is missing")
	}
	tr, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{k.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, status.Errorf(codes.Unavailable, "TokenReview: %v", err)
	}
	if !tr.Status.Authenticated {
		return authnv1.UserInfo{}, status.Errorf(codes.Unauthenticated, "security_token rejected: %s", tr.Status.Error)
	}
	// the API server checks the audience when asked for one; an authenticator that ignores
	// audiences answers with none, and such a token was not issued for us
	if !slices.Contains(tr.Status.Audiences, k.Audience) {
		return authnv1.UserInfo{}, status.Errorf(codes.Unauthenticated, "security_token was not issued for audience %q", k.Audience)
	}
	return tr.Status.User, nil
}

func (k *APIServer) Authorize(ctx context.Context, u authnv1.UserInfo, namespace string) error {
	ctx = kubelog.Context(ctx)
	extra := map[string]authzv1.ExtraValue{}
	for key, v := range u.Extra {
		extra[key] = authzv1.ExtraValue(v)
	}
	sar, err := k.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
			ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: namespace, Verb: "get", Group: snapv1.GroupName, Resource: "volumesnapshots",
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return status.Errorf(codes.Unavailable, "SubjectAccessReview: %v", err)
	}
	if !sar.Status.Allowed {
		return status.Errorf(codes.PermissionDenied, "%s may not get volumesnapshots.%s in namespace %q", u.Username, snapv1.GroupName, namespace)
	}
	return nil
}

func (k *APIServer) Snapshot(ctx context.Context, namespace, name string) (string, map[string]string, error) {
	ctx = kubelog.Context(ctx) // the Secret's body holds the Ceph key
	vs, err := k.Snapshots.SnapshotV1().VolumeSnapshots(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", nil, apiError(err, "VolumeSnapshot %s/%s", namespace, name)
	}
	st := vs.Status
	if st == nil || st.BoundVolumeSnapshotContentName == nil || *st.BoundVolumeSnapshotContentName == "" {
		return "", nil, status.Errorf(codes.FailedPrecondition, "VolumeSnapshot %s/%s is not bound to a VolumeSnapshotContent yet", namespace, name)
	}
	if st.ReadyToUse == nil || !*st.ReadyToUse {
		return "", nil, status.Errorf(codes.FailedPrecondition, "VolumeSnapshot %s/%s is not ready to use", namespace, name)
	}
	vsc, err := k.Snapshots.SnapshotV1().VolumeSnapshotContents().Get(ctx, *st.BoundVolumeSnapshotContentName, metav1.GetOptions{})
	if err != nil {
		return "", nil, apiError(err, "VolumeSnapshotContent %s of VolumeSnapshot %s/%s", *st.BoundVolumeSnapshotContentName, namespace, name)
	}
	if vsc.Spec.Driver != k.Driver {
		return "", nil, status.Errorf(codes.NotFound, "VolumeSnapshot %s/%s belongs to driver %q, not %q", namespace, name, vsc.Spec.Driver, k.Driver)
	}
	// A binding goes both ways. Whoever may write a VolumeSnapshot's status could otherwise
	// point it at any content (another namespace's snapshot) and read that through the
	// namespace they are authorised for.
	if ref := vsc.Spec.VolumeSnapshotRef; ref.Namespace != namespace || ref.Name != name || ref.UID != "" && ref.UID != vs.UID {
		return "", nil, status.Errorf(codes.FailedPrecondition, "VolumeSnapshotContent %s is bound to VolumeSnapshot %s/%s (uid %q), not to %s/%s (uid %q)",
			vsc.Name, ref.Namespace, ref.Name, ref.UID, namespace, name, vs.UID)
	}
	handle := ""
	if vsc.Status != nil && vsc.Status.SnapshotHandle != nil {
		handle = *vsc.Status.SnapshotHandle
	} else if vsc.Spec.Source.SnapshotHandle != nil {
		handle = *vsc.Spec.Source.SnapshotHandle // pre-provisioned
	}
	if handle == "" {
		return "", nil, status.Errorf(codes.FailedPrecondition, "VolumeSnapshotContent %s has no snapshot handle yet", vsc.Name)
	}
	secrets, err := k.secrets(ctx, vs, vsc)
	return handle, secrets, err
}

// The annotations the snapshot controller puts on the VolumeSnapshotContents of group snapshot
// members, which name no VolumeSnapshotClass: the Secret of their VolumeGroupSnapshotClass.
const (
	annSecretName      = "snapshot.storage.kubernetes.io/deletion-secret-name"
	annSecretNamespace = "snapshot.storage.kubernetes.io/deletion-secret-namespace"
)

// secrets reads the snapshotter Secret of the VolumeSnapshot's class (else its content's, else
// for a group snapshot's member the one its content's annotations name, else the driver's
// default class), its name and namespace templates resolved for this snapshot.
func (k *APIServer) secrets(ctx context.Context, vs *snapv1.VolumeSnapshot, vsc *snapv1.VolumeSnapshotContent) (map[string]string, error) {
	ref := secretRef{name: vsc.Annotations[annSecretName], namespace: vsc.Annotations[annSecretNamespace]}
	if named(vs.Spec.VolumeSnapshotClassName) || named(vsc.Spec.VolumeSnapshotClassName) || ref.name == "" || ref.namespace == "" {
		cls, err := k.snapshotClass(ctx, vs, vsc)
		if err != nil {
			return nil, err
		}
		var ok bool
		ref, ok, err = snapshotterSecret(cls.Parameters, vsc.Name, vs.Namespace, vs.Name)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "VolumeSnapshotClass %s: %v", cls.Name, err)
		}
		if !ok {
			return nil, status.Errorf(codes.FailedPrecondition, "VolumeSnapshotClass %s has no %s/%s parameters, so no Ceph credentials", cls.Name, paramSecretName, paramSecretNamespace)
		}
	}
	sec, err := k.Client.CoreV1().Secrets(ref.namespace).Get(ctx, ref.name, metav1.GetOptions{})
	if err != nil {
		return nil, apiError(err, "snapshotter Secret %s/%s", ref.namespace, ref.name)
	}
	out := make(map[string]string, len(sec.Data))
	for key, v := range sec.Data {
		out[key] = string(v)
	}
	return out, nil
}

func named(s *string) bool { return s != nil && *s != "" }

// snapshotClass is the VolumeSnapshotClass whose Secret reads the snapshot: the
// VolumeSnapshot's (what the external-snapshot-metadata sidecar uses), else the content's (a
// pre-provisioned snapshot), else this driver's default class.
func (k *APIServer) snapshotClass(ctx context.Context, vs *snapv1.VolumeSnapshot, vsc *snapv1.VolumeSnapshotContent) (*snapv1.VolumeSnapshotClass, error) {
	for _, name := range []*string{vs.Spec.VolumeSnapshotClassName, vsc.Spec.VolumeSnapshotClassName} {
		if name != nil && *name != "" {
			cls, err := k.Snapshots.SnapshotV1().VolumeSnapshotClasses().Get(ctx, *name, metav1.GetOptions{})
			if err != nil {
				return nil, apiError(err, "VolumeSnapshotClass %s", *name)
			}
			return cls, nil
		}
	}
	list, err := k.Snapshots.SnapshotV1().VolumeSnapshotClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, apiError(err, "VolumeSnapshotClasses")
	}
	var defaults []*snapv1.VolumeSnapshotClass
	for i, c := range list.Items {
		if c.Driver == k.Driver && c.Annotations[annDefaultClass] == "true" {
			defaults = append(defaults, &list.Items[i])
		}
	}
	if len(defaults) != 1 {
		return nil, status.Errorf(codes.FailedPrecondition, "VolumeSnapshot %s/%s and its content %s name no VolumeSnapshotClass, and driver %s has %d default classes, not one: no Ceph credentials",
			vs.Namespace, vs.Name, vsc.Name, k.Driver, len(defaults))
	}
	return defaults[0], nil
}

// apiError maps an API server error about what to a status: missing objects are NOT_FOUND,
// the rest means the API server could not answer.
func apiError(err error, what string, a ...any) error {
	msg := fmt.Sprintf(what, a...)
	switch {
	case apierrors.IsNotFound(err):
		return status.Errorf(codes.NotFound, "%s does not exist", msg)
	case apierrors.IsForbidden(err):
		// the driver's own RBAC is missing, not the caller's
		return status.Errorf(codes.Internal, "%s: the driver may not read it: %v", msg, err)
	}
	return status.Errorf(codes.Unavailable, "%s: %v", msg, err)
}
