package controller

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestPage(t *testing.T) {
	var all []*csi.Snapshot
	for _, id := range []string{"s3", "s1", "s5", "s2", "s4"} {
		all = append(all, &csi.Snapshot{SnapshotId: id})
	}
	valid := func(s string) bool { return strings.HasPrefix(s, "s") }
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		resp, err := Page(append([]*csi.Snapshot(nil), all...), token, 2, valid)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetSnapshot().GetSnapshotId())
		}
		if resp.GetNextToken() == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		token = resp.GetNextToken()
	}
	if strings.Join(got, ",") != "s1,s2,s3,s4,s5" {
		t.Fatalf("pages gave %v", got)
	}
	if _, err := Page(all, "x", 0, valid); status.Code(err) != codes.Aborted {
		t.Fatalf("bad token: %v", err)
	}
	if _, err := Page(all, "", -1, valid); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative max: %v", err)
	}
	if resp, _ := Page(all, "s5", 0, valid); len(resp.GetEntries()) != 0 {
		t.Fatalf("after the last: %v", resp)
	}
}

func TestGroupSnapshotChecks(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  *csi.CreateVolumeGroupSnapshotRequest
		want codes.Code
		ids  string
	}{
		{"no name", &csi.CreateVolumeGroupSnapshotRequest{SourceVolumeIds: []string{"a"}}, codes.InvalidArgument, ""},
		{"no sources", &csi.CreateVolumeGroupSnapshotRequest{Name: "g"}, codes.InvalidArgument, ""},
		{"empty source", &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{"a", ""}}, codes.InvalidArgument, ""},
		{"repeated source", &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{"b", "a", "b"}}, codes.InvalidArgument, ""},
		{"sorted", &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{"c", "a", "b"}}, codes.OK, "a,b,c"},
	} {
		ids, err := CheckCreateGroupSnapshot(tt.req)
		if status.Code(err) != tt.want || strings.Join(ids, ",") != tt.ids {
			t.Errorf("%s: %v, %v; want %v, %q", tt.name, ids, err, tt.want, tt.ids)
		}
	}
	if status.Code(CheckGroupSnapshotID("")) != codes.InvalidArgument || CheckGroupSnapshotID("x") != nil {
		t.Error("CheckGroupSnapshotID")
	}
	members := []string{"m2", "m1"}
	for _, tt := range []struct {
		given []string
		want  codes.Code
	}{
		{nil, codes.OK}, {[]string{"m1", "m2"}, codes.OK}, {[]string{"m2", "m1"}, codes.OK},
		{[]string{"m1"}, codes.InvalidArgument}, {[]string{"m1", "m2", "m3"}, codes.InvalidArgument},
		{[]string{"m1", "m1"}, codes.InvalidArgument}, {[]string{"m1", "x"}, codes.InvalidArgument},
	} {
		if got := status.Code(CheckMembers(tt.given, members)); got != tt.want {
			t.Errorf("CheckMembers(%v) = %v, want %v", tt.given, got, tt.want)
		}
	}
}
