package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// urlWriter hands every write to a channel (the serve banner).
type urlWriter chan string

func (w urlWriter) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// TestServe serves generated models of both architectures through the
// HTTP API at several tensor-parallel degrees; a greedy completion is the
// same at every degree.
func TestServe(t *testing.T) {
	greedy := map[string]string{}
	for _, tt := range []struct{ preset, tp string }{
		{"tiny", "1"}, {"tiny", "2"}, {"qwen3-tiny", "1"}, {"qwen3-tiny", "2"}, {"qwen3-tiny", "4"},
	} {
		t.Run(tt.preset+"/tp="+tt.tp, func(t *testing.T) {
			dir, tp := presetDir(t, tt.preset), tt.tp
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := make(urlWriter, 4)
			done := make(chan error, 1)
			go func() {
				done <- dispatch(ctx, []string{"serve", "--model", dir, "--port", "0", "--tp", tp,
					"--served-model-name", "tiny", "--max-model-len", "512", "--kv-budget-mib", "64", "--max-pending", "4"}, out)
			}()
			var banner string
			select {
			case banner = <-out:
			case err := <-done:
				t.Fatalf("serve ended before listening: %v", err)
			case <-time.After(2 * time.Minute):
				t.Fatal("serve did not print its URL")
			}
			m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+) \(tp=` + tp + `, max_model_len=512,`).FindStringSubmatch(banner)
			if m == nil {
				t.Fatalf("banner %q", banner)
			}
			url := m[1]
			client := &http.Client{Timeout: time.Minute}
			post := func(path, body string) (int, map[string]any) {
				res, err := client.Post(url+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				var v map[string]any
				b, _ := io.ReadAll(res.Body)
				if err := json.Unmarshal(b, &v); err != nil {
					t.Fatalf("%s: %v: %s", path, err, b)
				}
				return res.StatusCode, v
			}
			code, v := post("/v1/completions", `{"model":"tiny","prompt":"Hello","max_tokens":5,"ignore_eos":true,"temperature":0}`)
			if code != 200 || v["usage"].(map[string]any)["completion_tokens"].(float64) != 5 {
				t.Fatalf("completions: %d %v", code, v)
			}
			text := v["choices"].([]any)[0].(map[string]any)["text"].(string)
			if want, ok := greedy[tt.preset]; ok && text != want {
				t.Errorf("greedy completion at tp=%s: %q, at tp=1: %q", tp, text, want)
			}
			greedy[tt.preset] = text
			if code, v := post("/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3}`); code != 200 {
				t.Errorf("chat: %d %v", code, v)
			}
			// More choices than the engine ever holds: a 400, not a 429 to retry forever.
			if code, v := post("/v1/completions", `{"model":"tiny","prompt":"x","n":8,"max_tokens":1}`); code != 400 ||
				v["error"].(map[string]any)["code"] != "too_many_choices" {
				t.Errorf("n over --max-pending: %d %v", code, v)
			}
			if code, v := post("/v1/completions", `{"model":"other","prompt":"x"}`); code != 404 {
				t.Errorf("wrong model: %d %v", code, v)
			}
			for _, path := range []string{"/health", "/ready", "/metrics", "/v1/models"} {
				res, err := client.Get(url + path)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != 200 {
					t.Errorf("%s: %d", path, res.StatusCode)
				}
			}
			cancel() // as SIGINT does
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve after shutdown: %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("serve did not shut down")
			}
		})
	}
}

func TestServeFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--tp", "0"}, "must be positive"},
		{[]string{"--kv-budget-mib", "-1"}, "not negative"},
		{[]string{"--port", "70000"}, "out of range"},
		{[]string{"--max-pending", "-3"}, "not negative"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--model", "/nonexistent/model"}, "nonexistent"},
		{[]string{"--bogus"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			err := dispatch(context.Background(), append([]string{"serve"}, tt.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestServeBudget: with no --kv-budget-mib a GPU rank plans from its
// device (budget 0) and a CPU rank gets 512 MiB; a given budget is kept.
func TestServeBudget(t *testing.T) {
	for _, tc := range []struct {
		device string
		mib    int
		want   int64
	}{
		{"cuda", 0, 0},
		{"cpu", 0, 512 << 20},
		{"cuda", 2048, 2 << 30},
		{"cpu", 64, 64 << 20},
	} {
		c := serveCapacity(tc.device, tc.mib, 4, 0)
		if c.Budget != tc.want || c.PageSize != servePageSize || c.MaxSeqs != serveMaxSeqs {
			t.Errorf("--device %s --kv-budget-mib %d: %+v, want a budget of %d B", tc.device, tc.mib, c, tc.want)
		}
	}
}
