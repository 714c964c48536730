package ceph

import "testing"

func TestParseCommandTable(t *testing.T) {
	// excerpts of Pacific's monitor and Squid's manager tables
	out := []byte(`{
	 "cmd001":{"sig":["osd","blocklist",{"name":"range","type":"CephChoices","strings":"range","req":"false"},{"name":"blocklistop","type":"CephChoices","strings":"add|rm"},{"name":"addr","type":"CephEntityAddr"},{"name":"expire","type":"CephFloat","req":"false"}],"help":"add (optionally until <expire> seconds from now) or remove <addr> from blocklist"},
	 "cmd002":{"sig":["osd","blocklist","ls"],"help":"show blocklisted clients"},
	 "cmd003":{"sig":["fs","quiesce",{"name":"vol_name","type":"CephString"},{"name":"members","type":"CephString","n":"N","req":"false"},{"name":"set_id","type":"CephString","req":"false"}],"help":"quiesce"}}`)
	table, err := ParseCommandTable(out)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := table.Find("osd", "blocklist"); !ok || !s.Has("range") || !s.Has("expire") || s.Has("members") {
		t.Errorf("osd blocklist: %+v, %v", s, ok)
	}
	if s, ok := table.Find("fs", "quiesce"); !ok || !s.Has("set_id") {
		t.Errorf("fs quiesce: %+v, %v", s, ok)
	}
	if _, ok := table.Find("fs", "quiesce", "ls"); ok {
		t.Error("found a command the table does not have")
	}
	if _, ok := table.Find("osd"); ok {
		t.Error("a prefix of a command's words matched")
	}
	if _, err := ParseCommandTable([]byte("[]")); err == nil {
		t.Error("garbage decoded")
	}
}
