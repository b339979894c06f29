package policy

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestSchemaMatchesParser: the JSON Schema for editors lists exactly the fields
// the parser knows, at every level, so the two cannot drift apart. (The schema
// module, schema/, checks the repository's policies against the schema.)
func TestSchemaMatchesParser(t *testing.T) {
	raw, err := os.ReadFile("../../../schema/policy.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties  map[string]any `json:"properties"`
		Definitions map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(l []string) []string { c := slices.Clone(l); slices.Sort(c); return c }
	for _, c := range []struct {
		where        string
		schema, code []string
	}{
		{"top level", keys(s.Properties), topFields},
		{"rule", keys(s.Definitions["rule"].Properties), ruleFields},
		{"plan", keys(s.Definitions["planLimit"].Properties), planFields},
		{"tier", keys(s.Definitions["tier"].Properties), tierFields},
		{"http", keys(s.Definitions["http"].Properties), httpFields},
		{"client_ip", keys(s.Definitions["clientIP"].Properties), clientIPFields},
		{"plan source", keys(s.Definitions["planSource"].Properties), planSrcFields},
		{"route", keys(s.Definitions["route"].Properties), routeFields},
		{"cost source", keys(s.Definitions["costSource"].Properties), costFields},
		{"grpc", keys(s.Definitions["grpc"].Properties), grpcFields},
		{"grpc method", keys(s.Definitions["grpcMethod"].Properties), grpcEntryFields},
		{"grpc cost source", keys(s.Definitions["grpcCostSource"].Properties), costFields},
	} {
		if !slices.Equal(c.schema, sorted(c.code)) {
			t.Errorf("%s: schema has %v, parser knows %v", c.where, c.schema, sorted(c.code))
		}
	}
}
