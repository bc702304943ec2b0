package planner

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txt with the actual output")

// block is one case of a script: comment lines, commands, and the expected
// output that follows "----" up to the next blank line.
type block struct {
	comments []string
	cmds     []string
	want     []string
	line     int
}

func parseScript(t *testing.T, name, text string) []block {
	t.Helper()
	var blocks []block
	var cur block
	inOutput := false
	flush := func() {
		if len(cur.cmds) > 0 || len(cur.comments) > 0 {
			blocks = append(blocks, cur)
		}
		cur, inOutput = block{}, false
	}
	for i, line := range strings.Split(text, "\n") {
		switch {
		case inOutput && line == "":
			flush()
		case inOutput:
			cur.want = append(cur.want, line)
		case line == "----":
			if len(cur.cmds) == 0 {
				t.Fatalf("%s:%d: ---- without commands", name, i+1)
			}
			inOutput = true
		case strings.HasPrefix(line, "#"):
			if len(cur.cmds) > 0 {
				t.Fatalf("%s:%d: comment inside a command list", name, i+1)
			}
			cur.comments = append(cur.comments, line)
		case strings.TrimSpace(line) == "":
			if len(cur.cmds) > 0 {
				t.Fatalf("%s:%d: commands without ----", name, i+1)
			}
		default:
			if len(cur.cmds) == 0 {
				cur.line = i + 1
			}
			cur.cmds = append(cur.cmds, line)
		}
	}
	flush()
	return blocks
}

func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			var s script
			runScript(t, file, s.run)
		})
	}
}

// runScript runs a golden file's commands with run and compares each
// block's output with the file's (with -update, rewrites the file).
func runScript(t *testing.T, file string, run func(cmd string) ([]string, error)) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, b := range parseScript(t, file, string(data)) {
		var got []string
		for _, cmd := range b.cmds {
			lines, err := run(cmd)
			if err != nil {
				t.Fatalf("%s:%d: %s: %v", file, b.line, cmd, err)
			}
			got = append(got, lines...)
		}
		for _, c := range b.comments {
			out.WriteString(c + "\n")
		}
		if len(b.cmds) == 0 {
			out.WriteString("\n")
			continue
		}
		out.WriteString(strings.Join(b.cmds, "\n") + "\n----\n" + strings.Join(got, "\n") + "\n\n")
		if !*update && strings.Join(got, "\n") != strings.Join(b.want, "\n") {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, b.line, strings.Join(b.cmds, "; "),
				strings.Join(got, "\n"), strings.Join(b.want, "\n"))
		}
	}
	if *update {
		if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// script runs golden-file commands against a checker, so every scripted
// step is also checked against the model.
type script struct {
	c *checker
}

func (s *script) run(line string) ([]string, error) {
	f := strings.Fields(line)
	cmd, args := f[0], f[1:]
	if cmd != "config" && s.c == nil {
		return nil, fmt.Errorf("config must come first")
	}
	ints := func(n int) ([]int, error) {
		if len(args) != n {
			return nil, fmt.Errorf("want %d arguments, got %d", n, len(args))
		}
		v := make([]int, n)
		for i, a := range args {
			x, err := strconv.Atoi(a)
			if err != nil {
				return nil, err
			}
			v[i] = x
		}
		return v, nil
	}
	switch cmd {
	case "config":
		var cfg Config
		fields := map[string]*int{"prefill": &cfg.MaxPrefillTokens, "rows": &cfg.MaxRows, "slots": &cfg.Slots,
			"pages": &cfg.KVPages, "page": &cfg.PageSize, "len": &cfg.MaxModelLen}
		for _, a := range args {
			k, v, ok := strings.Cut(a, "=")
			dst := fields[k]
			if !ok || dst == nil {
				return nil, fmt.Errorf("bad config argument %q", a)
			}
			x, err := strconv.Atoi(v)
			if err != nil {
				return nil, err
			}
			*dst = x
		}
		c, err := newChecker(cfg)
		if err != nil {
			return []string{err.Error()}, nil
		}
		s.c = c
		return []string{"ok"}, nil
	case "add":
		v, err := ints(3)
		if err != nil {
			return nil, err
		}
		addErr, err := s.c.add(Request{ID: RequestID(v[0]), PromptLen: v[1], MaxNewTokens: v[2]})
		if err != nil {
			return nil, err
		}
		if addErr != nil {
			return []string{addErr.Error()}, nil
		}
		return []string{"ok"}, nil
	case "schedule":
		plan, err := s.c.schedule()
		if err != nil {
			return nil, err
		}
		return strings.Split(plan.String(), "\n"), nil
	case "update":
		all := len(args) == 1 && args[0] == "all"
		var ids []RequestID
		if !all {
			for _, a := range args {
				x, err := strconv.ParseUint(a, 10, 64)
				if err != nil {
					return nil, err
				}
				ids = append(ids, RequestID(x))
			}
		}
		fin, err := s.c.update(ids, all)
		if err != nil {
			return nil, err
		}
		if len(fin) == 0 {
			return []string{"ok"}, nil
		}
		return []string{"finished " + joinIDs(fin)}, nil
	case "abort", "finish":
		v, err := ints(1)
		if err != nil {
			return nil, err
		}
		ok, err := s.c.end(RequestID(v[0]), cmd == "finish")
		if err != nil {
			return nil, err
		}
		return []string{strconv.FormatBool(ok)}, nil
	case "requeue":
		v, err := ints(1)
		if err != nil {
			return nil, err
		}
		s.c.requeue(RequestID(v[0]))
		return []string{"ok"}, nil
	case "requeue-all":
		ids, err := s.c.requeueAll()
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			return []string{"requeued none"}, nil
		}
		return []string{"requeued " + joinIDs(ids)}, nil
	case "stats":
		return []string{s.c.p.Stats().String()}, nil
	}
	return nil, fmt.Errorf("unknown command %q", cmd)
}

func joinIDs(ids []RequestID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(uint64(id), 10)
	}
	return strings.Join(s, " ")
}
