package main

import (
	"encoding/json"
	"testing"
)

func TestParseTraffic(t *testing.T) {
	cases := []struct {
		shares, tags []string
		want         string
		bad          bool
	}{
		{[]string{"v7=90", "latest=10"}, []string{"canary=latest"}, `[{"percent":90,"version":7},{"latest":true,"percent":10,"tag":"canary"}]`, false},
		{[]string{"7=100"}, []string{"next=latest"}, `[{"percent":100,"version":7},{"latest":true,"percent":0,"tag":"next"}]`, false},
		{[]string{"latest=100"}, []string{"stable=v3", "old=v2"}, `[{"latest":true,"percent":100},{"percent":0,"tag":"stable","version":3},{"percent":0,"tag":"old","version":2}]`, false},
		{[]string{"v7"}, nil, "", true},
		{[]string{"vx=100"}, nil, "", true},
		{[]string{"latest=100"}, []string{"canary"}, "", true},
	}
	for _, c := range cases {
		got, err := parseTraffic(c.shares, c.tags)
		if (err != nil) != c.bad {
			t.Errorf("%v %v: err %v", c.shares, c.tags, err)
			continue
		}
		if c.bad {
			if _, usage := err.(usageError); !usage {
				t.Errorf("%v: %T is not a usage error (exit 2)", c.shares, err)
			}
			continue
		}
		b, _ := json.Marshal(got)
		if string(b) != c.want {
			t.Errorf("%v %v:\n got %s\nwant %s", c.shares, c.tags, b, c.want)
		}
	}
}
