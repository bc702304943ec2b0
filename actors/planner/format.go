package planner

import (
	"strconv"
	"strings"
)

// String is a deterministic dump of the plan, one line per item, used by the
// golden files and for logs:
//
//	step 3
//	  seq 1 slot=0 cached=16 len=1 pages=[0 1] sample
//	  seq 2 slot=1 cached=32 len=9 pages=[0 1 2 3] sample restore=0 save=1
//	  freed 2 slot=1 pages=[2 3]
//	  reset [1]
//
// An empty plan prints "idle".
func (p Plan) String() string {
	if len(p.Seqs) == 0 {
		return "idle"
	}
	var b strings.Builder
	b.WriteString("step " + strconv.FormatUint(p.Step, 10))
	for _, s := range p.Seqs {
		b.WriteString("\n  seq " + strconv.FormatUint(uint64(s.ID), 10))
		b.WriteString(" slot=" + strconv.Itoa(s.Slot))
		b.WriteString(" cached=" + strconv.Itoa(s.Cached))
		b.WriteString(" len=" + strconv.Itoa(s.Len))
		b.WriteString(" pages=" + formatPages(s.Pages))
		if s.Sample {
			b.WriteString(" sample")
		}
		if s.Restore >= 0 && s.Cached > 0 {
			b.WriteString(" restore=" + strconv.Itoa(s.Restore))
		}
		if s.Save >= 0 {
			b.WriteString(" save=" + strconv.Itoa(s.Save))
		}
	}
	for _, f := range p.Freed {
		b.WriteString("\n  freed " + strconv.FormatUint(uint64(f.ID), 10))
		b.WriteString(" slot=" + strconv.Itoa(f.Slot))
		b.WriteString(" pages=" + formatPages(f.Pages))
	}
	if len(p.Reset) > 0 {
		b.WriteString("\n  reset [")
		for i, s := range p.Reset {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Itoa(s))
		}
		b.WriteByte(']')
	}
	return b.String()
}

func formatPages(pages []int32) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, pg := range pages {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(int64(pg), 10))
	}
	b.WriteByte(']')
	return b.String()
}
