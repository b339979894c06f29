package simulate

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Reading a request log: CSV (with or without a header) or JSON lines, a
// request at a time (logReader), each line's fields checked by
// simulation.request.

// columns is what a CSV header says each column holds.
type columns struct {
	time, cost, key int   // column indices; −1 when absent
	dur             int   // the duration column, or −1
	actual          int   // the actual column, or −1
	ruleKeys        []int // per rule of the simulation: its key column, or −1
}

// logReader reads requests one at a time.
type logReader struct {
	sim  *simulation
	sc   *bufio.Scanner
	line int
	cols *columns // from a CSV header; nil for headerless CSV
	head []string // the key columns' names, for the output
}

func (s *simulation) newLogReader(r io.Reader) *logReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lr := &logReader{sim: s, sc: sc}
	// Without a CSV header naming them, the output still gives each keyed
	// rule of a tier its own column: joined in one (k|bob), keys holding a
	// | would not read back as they were.
	lr.head = []string{"key"}
	if len(s.keyed) > 1 {
		lr.head = lr.head[:0]
		for _, j := range s.keyed {
			lr.head = append(lr.head, s.rules[j].rule.Name)
		}
	}
	return lr
}

// next returns the next request, or io.EOF.
func (lr *logReader) next() (request, error) {
	for lr.sc.Scan() {
		lr.line++
		text := strings.TrimSpace(lr.sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if strings.HasPrefix(text, "{") {
			e, isEvent, err := lr.event(text)
			if err != nil {
				return request{}, err
			}
			if isEvent {
				return request{event: &e, line: e.line, wall: e.wall}, nil
			}
			return lr.jsonLine(text)
		}
		rec, err := csv.NewReader(strings.NewReader(text)).Read()
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return request{}, fmt.Errorf("line %d: %v", lr.line, err)
		}
		if lr.cols == nil && len(rec) > 0 && strings.TrimSpace(rec[0]) == "time" {
			if err := lr.header(rec); err != nil {
				return request{}, fmt.Errorf("line %d: %v", lr.line, err)
			}
			continue
		}
		return lr.csvLine(rec)
	}
	if err := lr.sc.Err(); err != nil {
		return request{}, fmt.Errorf("line %d: %v", lr.line+1, err)
	}
	return request{}, io.EOF
}

// header reads a CSV header: time, cost, key, and a column per keyed rule
// (by its name as written or its Go name); other names are ignored.
func (lr *logReader) header(rec []string) error {
	c := &columns{time: -1, cost: -1, key: -1, dur: -1, actual: -1, ruleKeys: make([]int, len(lr.sim.rules))}
	for i := range c.ruleKeys {
		c.ruleKeys[i] = -1
	}
	for i, name := range rec {
		name = strings.TrimSpace(name)
		switch name {
		case "time":
			c.time = i
		case "cost":
			c.cost = i
		case "duration":
			c.dur = i
		case "actual":
			c.actual = i
		case "key":
			c.key = i
		default:
			for j, r := range lr.sim.rules {
				if r.rule.KeyType != "" && (name == r.rule.Name || name == r.rule.GoName) {
					c.ruleKeys[j] = i
				}
			}
		}
	}
	lr.head = nil
	if c.key >= 0 {
		lr.head = []string{"key"}
	}
	for _, j := range lr.sim.keyed {
		if c.ruleKeys[j] >= 0 {
			lr.head = append(lr.head, lr.sim.rules[j].rule.Name)
		} else if c.key < 0 {
			return fmt.Errorf("the header has no key column for rule %s: add a column named %s (or key, for one key for every rule)",
				lr.sim.rules[j].rule.Name, lr.sim.rules[j].rule.Name)
		}
	}
	lr.cols = c
	return nil
}

func (lr *logReader) csvLine(rec []string) (request, error) {
	raw := func(i int) string { // keys are taken as written
		if i >= 0 && i < len(rec) {
			return rec[i]
		}
		return ""
	}
	field := func(i int) string { return strings.TrimSpace(raw(i)) }
	if lr.cols == nil {
		if len(rec) > 3 {
			return request{}, fmt.Errorf("line %d: want time,key,cost; got %d fields (a header row names more columns)", lr.line, len(rec))
		}
		keys, err := lr.sim.splitKeys(raw(1))
		if err != nil {
			return request{}, fmt.Errorf("line %d: %v", lr.line, err)
		}
		return lr.sim.request(lr.line, field(0), keys, field(2), "", "")
	}
	c := lr.cols
	keys := make([]string, len(lr.sim.rules))
	for _, j := range lr.sim.keyed {
		if c.ruleKeys[j] >= 0 {
			keys[j] = raw(c.ruleKeys[j])
		} else {
			keys[j] = raw(c.key)
		}
	}
	return lr.sim.request(lr.line, field(c.time), keys, field(c.cost), field(c.dur), field(c.actual))
}

func (lr *logReader) jsonLine(text string) (request, error) {
	var j struct {
		Time json.RawMessage  `json:"time"`
		Key  *string          `json:"key"`
		Keys map[string]any   `json:"keys"`
		Cost *json.RawMessage `json:"cost"`
		Dur  *json.RawMessage `json:"duration"`
		Act  *json.RawMessage `json:"actual"`
	}
	if err := json.Unmarshal([]byte(text), &j); err != nil {
		return request{}, fmt.Errorf("line %d: not valid JSON: %v", lr.line, err)
	}
	keys := make([]string, len(lr.sim.rules))
	switch {
	case j.Keys != nil:
		for _, i := range lr.sim.keyed {
			r := lr.sim.rules[i].rule
			v, ok := j.Keys[r.Name]
			if !ok {
				v, ok = j.Keys[r.GoName]
			}
			if !ok {
				return request{}, fmt.Errorf("line %d: keys has no key for rule %s", lr.line, r.Name)
			}
			keys[i] = strings.Trim(fmt.Sprint(v), `"`)
			if f, isNum := v.(float64); isNum {
				keys[i] = strconv.FormatFloat(f, 'f', -1, 64)
			}
		}
	case j.Key != nil:
		var err error
		if keys, err = lr.sim.splitKeys(*j.Key); err != nil {
			return request{}, fmt.Errorf("line %d: %v", lr.line, err)
		}
	}
	cost := ""
	if j.Cost != nil {
		cost = string(*j.Cost)
	}
	dur := ""
	if j.Dur != nil {
		dur = strings.Trim(string(*j.Dur), `"`)
	}
	actual := ""
	if j.Act != nil {
		actual = string(*j.Act)
	}
	return lr.sim.request(lr.line, strings.Trim(string(j.Time), `"`), keys, cost, dur, actual)
}

// splitKeys gives each keyed rule its key from one field: the same key for all,
// or one per keyed rule separated by |.
func (s *simulation) splitKeys(field string) ([]string, error) {
	keys := make([]string, len(s.rules))
	parts := []string{field} // one keyed rule: the field is its key, | and all
	if len(s.keyed) > 1 {
		parts = strings.Split(field, "|")
	}
	if len(parts) != 1 && len(parts) != len(s.keyed) {
		return nil, fmt.Errorf("%d keys for %d keyed rules", len(parts), len(s.keyed))
	}
	for n, j := range s.keyed {
		keys[j] = parts[min(n, len(parts)-1)]
	}
	return keys, nil
}
