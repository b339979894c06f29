package main

// The model: plain structs whose fields are the final values. Validation builds
// it; emission only prints it.

type model struct {
	source string // the policy file's name, as given
	pkg    string
	plans  []plan
	rules  []rule
	tiers  []tier
}

type plan struct {
	name   string // as written
	goName string // the constant: Plan + CamelCase(name)
}

type rule struct {
	name     string  // as written in the policy
	goName   string  // exported Go identifier
	keyType  string  // Go type of the key; "" for a global (single-bucket) rule
	planned  bool    // the rule has its own numbers per plan, and a bucket set per plan
	limits   []limit // one, or one per plan (in the order of model.plans) when planned
	cost     int64   // default cost of Allow
	maxKeys  int64   // 0: no cap
	allowCap bool    // at the cap: allow untracked (else deny)
	doc      string
}

// limit is one bucket's numbers: the rule's, or one per plan when the policy
// has plans (in the order of model.plans).
type limit struct {
	tokens     int64
	periodNs   int64
	burst      int64
	initial    int64
	initialSet bool
	interval   bool
	aligned    bool
	cost       int64 // the default cost under this limit

	// The fixed-point units NewRule computes for a greedy limit (see
	// atomicbucket.Rule.Units), emitted as constants; greedy is false for
	// interval limits, which have none.
	scale, emit, tau int64
	greedy           bool
}

type tier struct {
	name   string
	goName string
	rules  []int // indices into model.rules, in order
	doc    string
}
