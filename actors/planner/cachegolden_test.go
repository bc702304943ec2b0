package planner

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"cohort/actors/prefix"
)

// TestCacheGolden runs the scripts of testdata/prefix, the prefix cache's
// golden files, against the memory model of cache_test.go: every scripted
// plan is also executed and checked as the property test checks them.
//
// Commands: config (the golden files' fields, plus snapshots=N, markcut=N and
// pages-only); add ID max=N [sys=N | turn=ID | copy=ID] [boundary]
// [tail=N] [noresume] (a prompt of sys shared tokens, request turn's whole
// sequence or request copy's prompt, then tail tokens of its own; boundary
// marks the end of the shared part); schedule; update (every sampled request gets token 7;
// those at their max finish); abort ID; reset-cache; requeue-all; stats.
func TestCacheGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "prefix", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			s := &cacheScript{t: t, prompts: map[RequestID][]int32{}}
			runScript(t, file, s.run)
		})
	}
}

type cacheScript struct {
	t       *testing.T
	w       *cacheWorld
	last    Plan
	prompts map[RequestID][]int32
}

func (s *cacheScript) run(line string) ([]string, error) {
	f := strings.Fields(line)
	cmd, args := f[0], f[1:]
	if cmd != "config" && s.w == nil {
		return nil, fmt.Errorf("config must come first")
	}
	switch cmd {
	case "config":
		return s.config(args)
	case "add":
		return s.add(args)
	case "schedule":
		s.last = s.w.p.Schedule()
		if len(s.last.Seqs) > 0 {
			s.w.run(s.last)
		}
		return strings.Split(s.last.String(), "\n"), nil
	case "update":
		before := liveIDs(s.w.live)
		s.w.update(s.last)
		var fin []string
		for _, id := range before {
			if s.w.live[id] == nil {
				fin = append(fin, strconv.FormatUint(uint64(id), 10))
			}
		}
		if len(fin) == 0 {
			return []string{"ok"}, nil
		}
		return []string{"finished " + strings.Join(fin, " ")}, nil
	case "abort":
		id, err := strconv.ParseUint(args[0], 10, 64)
		if err != nil {
			return nil, err
		}
		s.w.end(RequestID(id), false)
		return []string{"ok"}, nil
	case "reset-cache":
		s.w.p.ResetCache()
		return []string{"ok"}, nil
	case "requeue-all":
		ids := s.w.p.RequeueAll()
		s.w.tables = map[RequestID][]int32{}
		s.w.mem.wipe()
		return []string{fmt.Sprint("requeued ", ids)}, nil
	case "stats":
		return []string{s.w.p.Stats().String()}, nil
	}
	return nil, fmt.Errorf("unknown command %q", cmd)
}

// liveIDs lists the live ids in order.
func liveIDs(live map[RequestID]*worldReq) []RequestID {
	ids := make([]RequestID, 0, len(live))
	for id := range live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (s *cacheScript) config(args []string) ([]string, error) {
	cfg := Config{PrefixCache: true}
	fields := map[string]*int{"prefill": &cfg.MaxPrefillTokens, "rows": &cfg.MaxRows, "slots": &cfg.Slots,
		"pages": &cfg.KVPages, "page": &cfg.PageSize, "len": &cfg.MaxModelLen, "snapshots": &cfg.Snapshots,
		"markcut": &cfg.MarkCutBlocks}
	for _, a := range args {
		if a == "pages-only" {
			cfg.PagesOnly = true
			continue
		}
		k, v, ok := strings.Cut(a, "=")
		dst := fields[k]
		x, err := strconv.Atoi(v)
		if !ok || dst == nil || err != nil {
			return nil, fmt.Errorf("bad config argument %q", a)
		}
		*dst = x
	}
	w, err := newWorld(s.t, cfg)
	if err != nil {
		return []string{err.Error()}, nil
	}
	s.w = w
	return []string{"ok"}, nil
}

func (s *cacheScript) add(args []string) ([]string, error) {
	id, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return nil, err
	}
	var prompt []int32
	q := Request{ID: RequestID(id)}
	boundary := false
	for _, a := range args[1:] {
		k, v, _ := strings.Cut(a, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "max":
			q.MaxNewTokens = n
		case "sys":
			for i := range n {
				prompt = append(prompt, int32(1000+i))
			}
		case "turn":
			prompt = slices.Clone(s.w.doneTokens(RequestID(n)))
		case "copy":
			prompt = slices.Clone(s.prompts[RequestID(n)])
		case "tail":
			for i := range n {
				prompt = append(prompt, int32(int(id)*100+i))
			}
			continue
		case "boundary":
			boundary = true
		case "noresume":
			q.NoResume = true
		default:
			return nil, fmt.Errorf("bad add argument %q", a)
		}
		if boundary && k != "boundary" {
			return nil, fmt.Errorf("boundary must follow the shared part")
		}
		if k == "boundary" {
			q.Boundaries = []int{len(prompt)}
		}
	}
	q.PromptLen, q.Blocks = len(prompt), prefix.BlockHashes(prompt, s.w.cfg.PageSize)
	if err := s.w.p.Add(q); err != nil {
		return []string{err.Error()}, nil
	}
	s.w.live[q.ID] = &worldReq{tokens: prompt, prompt: len(prompt), maxNew: q.MaxNewTokens}
	s.prompts[q.ID] = prompt
	return []string{"ok"}, nil
}
