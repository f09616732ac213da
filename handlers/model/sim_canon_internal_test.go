package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// oldSimInput is parseSimInput's canonical form as first written (decode into interface
// values with UseNumber, json.Marshal): the answers a sim gives must not change with it.
func oldSimInput(input []byte) ([]byte, bool, error) {
	c, has, _, err := oldSimDirective(input)
	return c, has, err
}

// oldSimDirective is oldSimInput with the directive the first implementation read (ok false
// when it refused it).
func oldSimDirective(input []byte) ([]byte, bool, simDirective, error) {
	var d simDirective
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		if err == nil {
			err = errors.New("trailing data")
		}
		return nil, false, d, err
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return nil, false, d, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return canon, false, d, nil
	}
	if _, has := obj["sim"]; !has {
		return canon, false, d, nil
	}
	var members struct {
		Sim json.RawMessage `json:"sim"`
	}
	if err := json.Unmarshal(input, &members); err != nil {
		return canon, true, d, nil
	}
	dd := json.NewDecoder(bytes.NewReader(members.Sim))
	dd.DisallowUnknownFields()
	_ = dd.Decode(&d)
	return canon, true, d, nil
}

// FuzzSimInput checks that parseSimInput's canonical form, and whether it reads a "sim"
// directive, are those of the first implementation (which also let a stray ] or } follow the
// value, and kept the last of duplicate members: such input is refused now).
func FuzzSimInput(f *testing.F) {
	for _, s := range []string{`{"question":"q","sim":{"latencyMs":0}}`, `{"a":"<&>","b":[1,2.0]}`,
		`{"x":{"sim":1}}`, `[{"sim":{}}]`, `{"sim":null}`, `{"s\u0069m":{"latencyMs":1}}`, `"sim"`,
		`{"a":"\u2028"}`, `{"a":1} x`, `{`, `{"SIM":{"hang":true}}`, `{"sim":{},"sim":{"latencyMs":3}}`,
		`{"sim":{"latencyMs":1},"Sim":{"latencyMs":2}}`, `{"Sim":{"fail":"final"},"sim":{"latencyMs":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		if len(bytes.TrimSpace(input)) == 0 {
			return
		}
		want, wantSim, werr := oldSimInput(input)
		if werr == nil && !json.Valid(input) {
			werr = errors.New("not one JSON value") // the first version let a stray ] or } follow the value
		}
		if _, dup := topics.DuplicateMember("$", input); werr == nil && dup {
			werr = errors.New("duplicate member") // the first version kept the last one
		}
		got, d, err := parseSimInput(input)
		var me *Error
		if werr != nil {
			if err == nil || !errors.As(err, &me) || me.Code != "invalid_input" {
				t.Fatalf("%q: error %v, want invalid_input (%v)", input, err, werr)
			}
			return
		}
		if err != nil {
			if errors.As(err, &me) && me.Code == "sim_bad_directive" && wantSim {
				return // a bad directive is refused, as before
			}
			t.Fatalf("%q: %v", input, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%q: canonical form\ngot  %s\nwant %s", input, got, want)
		}
		if _, _, wantD, _ := oldSimDirective(input); !reflect.DeepEqual(d, wantD) {
			t.Fatalf("%q: directive %+v, want %+v", input, d, wantD)
		}
		if !wantSim && (d != simDirective{}) {
			t.Fatalf("%q: directive %+v read from an input without a top-level sim member", input, d)
		}
	})
}
