package main

import (
	"slices"
	"strings"
	"testing"
)

// TestParseDevices: each list gives the ranks' GPUs, or an error saying why
// not.
func TestParseDevices(t *testing.T) {
	for _, c := range []struct {
		list      string
		tp, count int
		want      []int  // the ranks' GPUs, when why is empty
		why       string // what the error says
	}{
		{"", 1, 8, []int{0}, ""},
		{"", 4, 4, []int{0, 1, 2, 3}, ""},
		{"1,0", 2, 2, []int{1, 0}, ""},
		{" 7, 3 ,5,0 ", 4, 8, []int{7, 3, 5, 0}, ""},
		{"12", 1, -1, []int{12}, ""}, // unknown count: not checked
		{"9,10,11,12,13,14,15,16", 8, 17, []int{9, 10, 11, 12, 13, 14, 15, 16}, ""},
		{"", 2, 1, nil, "host has 1"},
		{"0,0", 2, 2, nil, "ranks 0 and 1"},
		{"0,1", 3, 4, nil, "lists 2 GPUs but --tp is 3"},
		{"0,x", 2, 2, nil, "not a device ordinal"},
		{"0,-1", 2, 2, nil, "not a device ordinal"},
		{"0,2", 2, 2, nil, "does not exist"},
		{"", 0, 2, nil, "at least 1"},
	} {
		got, err := parseDevices(c.list, c.tp, c.count)
		switch {
		case c.why == "" && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("parseDevices(%q, %d, %d) = %v, %v; want %v", c.list, c.tp, c.count, got, err, c.want)
		case c.why != "" && (err == nil || !strings.Contains(err.Error(), c.why)):
			t.Errorf("parseDevices(%q, %d, %d) error %v, want one saying %q", c.list, c.tp, c.count, err, c.why)
		}
	}
}

// TestParseWorkerDevices: `worker --devices` gives the worker's GPUs (any
// number of them), or an error saying why not.
func TestParseWorkerDevices(t *testing.T) {
	for _, c := range []struct {
		list  string
		count int
		want  []int  // the GPUs, when why is empty
		why   string // what the error says
	}{
		{"", 2, []int{0, 1}, ""},
		{"", 8, []int{0, 1, 2, 3, 4, 5, 6, 7}, ""},
		{"1,0", 2, []int{1, 0}, ""},
		{" 3 , 5", 8, []int{3, 5}, ""},
		{"7", -1, []int{7}, ""}, // unknown count: not checked
		{"", -1, []int{}, ""},
		{"", 0, nil, "this host has no GPU"},
		{"0,0", 2, nil, "lists GPU 0 twice"},
		{"0,x", 2, nil, `"x" is not a device ordinal`},
		{"-1", 2, nil, `"-1" is not a device ordinal`},
		{"0,", 2, nil, `"" is not a device ordinal`},
		{"0,2", 2, nil, "GPU 2 does not exist: this host has 2 GPU(s)"},
	} {
		got, err := parseWorkerDevices(c.list, c.count)
		switch {
		case c.why == "" && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("parseWorkerDevices(%q, %d) = %v, %v; want %v", c.list, c.count, got, err, c.want)
		case c.why != "" && (err == nil || !strings.Contains(err.Error(), c.why)):
			t.Errorf("parseWorkerDevices(%q, %d) error %v, want one saying %q", c.list, c.count, err, c.why)
		}
	}
}
