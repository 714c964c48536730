package kube

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// resources finds the API resource of rendered objects through discovery (CRDs included).
type resources struct {
	mapper *restmapper.DeferredDiscoveryRESTMapper
	dyn    dynamic.Interface
}

func newResources(d discovery.DiscoveryInterface, dyn dynamic.Interface) *resources {
	return &resources{mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(d)), dyn: dyn}
}

// of is the client for o's resource, in o's namespace (or defaultNS when a namespaced object
// names none).
func (r *resources) of(t *testing.T, o *unstructured.Unstructured, defaultNS string) dynamic.ResourceInterface {
	t.Helper()
	gvk := o.GroupVersionKind()
	m, err := r.mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
	if err != nil {
		t.Fatalf("%s: %v", gvk, err)
	}
	ns := o.GetNamespace()
	if ns == "" && m.Scope.Name() == "namespace" {
		ns = defaultNS
	}
	return r.dyn.Resource(m.Resource).Namespace(ns)
}
