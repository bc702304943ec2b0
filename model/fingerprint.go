package model

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// maxHeaderBytes bounds the safetensors header Fingerprint reads.
const maxHeaderBytes = 100 << 20

// Fingerprint identifies a checkpoint directory cheaply, without reading the
// weights: a SHA-256 over config.json and, for every *.safetensors file in
// name order, its name, size and header (tensor names, dtypes, shapes and
// offsets). Two processes that see the same fingerprint hold the same
// model, up to silent corruption of the weight bytes themselves.
func Fingerprint(dir string) (string, error) {
	h := sha256.New()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "", fmt.Errorf("model: fingerprint: %w", err)
	}
	fmt.Fprintf(h, "config.json %d\n", len(cfg))
	h.Write(cfg)
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return "", fmt.Errorf("model: fingerprint: %w", err)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("model: fingerprint: no *.safetensors in %s", dir)
	}
	sort.Strings(files)
	for _, f := range files {
		if err := hashSafetensorsHeader(h, f); err != nil {
			return "", fmt.Errorf("model: fingerprint: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

func hashSafetensorsHeader(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	var n uint64
	if err := binary.Read(f, binary.LittleEndian, &n); err != nil {
		return fmt.Errorf("%s: header length: %w", path, err)
	}
	if n > maxHeaderBytes || int64(n)+8 > st.Size() {
		return fmt.Errorf("%s: header length %d does not fit the file (%d bytes)", path, n, st.Size())
	}
	fmt.Fprintf(w, "%s %d %d\n", filepath.Base(path), st.Size(), n)
	_, err = io.CopyN(w, f, int64(n))
	return err
}
