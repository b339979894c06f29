// Package schema checks policy.schema.json, the JSON Schema of limitgen's policy
// language for editors (yaml-language-server), against the repository's
// policies. It is its own module so that the validator never becomes a
// dependency of limitgen.
package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	s, err := c.Compile("policy.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// load reads a YAML policy into the generic values a JSON Schema validates.
func load(t *testing.T, path string) any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil // not YAML: nothing for a schema to say
	}
	return v
}

// TestValidPoliciesMatchSchema: every policy the generator accepts in the
// repository is valid under the schema.
func TestValidPoliciesMatchSchema(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("../gen/testdata/valid/*.yaml")
	files = append(files, "../policy.yaml", "../examples/quickstart/policy.yaml")
	if len(files) < 20 {
		t.Fatalf("only %d policies found", len(files))
	}
	for _, f := range files {
		if err := s.Validate(load(t, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// structural are the invalid policies whose problem is in the shape the schema
// describes (fields, types, enums); the others (numbers that do not fit,
// colliding names, tiers naming missing rules) only the generator can see.
var structural = []string{
	"unknown_top_field", "unknown_rule_field", "missing_package", "bad_package_name", "no_rules",
	"rule_without_name", "rule_name_not_identifier", "rate_not_a_rate", "rate_given_twice", "no_rate",
	"burst_zero", "no_burst", "cost_zero", "bad_refill", "bad_key_type", "bad_at_cap", "tier_rule_twice",
	"tier_without_rules", "many_problems_at_once", "rate_negative",
	"burst_negative", "cost_negative", "max_keys_negative", "plan_burst_negative",
	"http_route_cost_zero", "plan_cost_zero",
}

// TestStructuralErrorsFailSchema: the schema catches the structural mistakes
// of the generator's invalid corpus, so an editor shows them while typing.
func TestStructuralErrorsFailSchema(t *testing.T) {
	s := compileSchema(t)
	for _, name := range structural {
		path := filepath.Join("../gen/testdata/invalid", name+".yaml")
		v := load(t, path)
		if v == nil {
			t.Fatalf("%s does not parse as YAML", path)
		}
		if err := s.Validate(v); err == nil {
			t.Errorf("%s: the schema accepts it", name)
		} else {
			t.Logf("%s: %s", name, strings.SplitN(err.Error(), "\n", 2)[0])
		}
	}
}
