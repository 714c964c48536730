package kubetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/kubetest"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestControlPlane(t *testing.T) {
	cp := kubetest.Start(t, kubetest.Options{ControllerManager: true})
	kc := kubernetes.NewForConfigOrDie(cp.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("Deployment", func(t *testing.T) {
		labels := map[string]string{"app": "kubetest"}
		replicas := int32(1)
		if _, err := kc.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "kubetest"},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The deployment controller makes a ReplicaSet, and the ReplicaSet controller its pod:
		// two controllers of kube-controller-manager, with no kubelet to run the pod.
		deadline := time.Now().Add(60 * time.Second)
		for {
			pods, err := kc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=kubetest"})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				if ref := metav1.GetControllerOf(&p); ref != nil && ref.Kind == "ReplicaSet" {
					t.Logf("pod %s of ReplicaSet %s is %s", p.Name, ref.Name, p.Status.Phase)
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no pod owned by a ReplicaSet of Deployment kubetest after 60 s (%d pods with its labels)", len(pods.Items))
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("SnapshotCRDs", func(t *testing.T) {
		cp.ApplyCRDs(t, kubetest.SnapshotCRDs(t)...)
		// twice: installing the same CRDs again is harmless
		cp.ApplyCRDs(t, kubetest.SnapshotCRDs(t)...)
		gvr := schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
		l, err := dynamic.NewForConfigOrDie(cp.Admin).Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list volumesnapshots: %v", err)
		}
		if len(l.Items) != 0 {
			t.Fatalf("%d volumesnapshots in a new cluster", len(l.Items))
		}
	})

	t.Run("Kubeconfig", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig(t, cp.AdminToken))
		if err != nil {
			t.Fatal(err)
		}
		ns, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("admin kubeconfig: %v", err)
		}
		if ns.Name != "default" {
			t.Fatalf("got namespace %q", ns.Name)
		}
	})

	t.Run("Token", func(t *testing.T) {
		// A token of the "default" service account, which the controller manager created.
		cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig(t, cp.Token(t, "default", "default")))
		if err != nil {
			t.Fatal(err)
		}
		kc := kubernetes.NewForConfigOrDie(cfg)
		rev, err := kc.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("self subject review with a service account token: %v", err)
		}
		if want := "system:serviceaccount:default:default"; rev.Status.UserInfo.Username != want {
			t.Fatalf("token authenticates as %q, want %q", rev.Status.UserInfo.Username, want)
		}
	})
}
