package safetensors

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
)

// Well-known file names inside a model directory.
const (
	indexName  = "model.safetensors.index.json"
	singleName = "model.safetensors"
)

// File is a set of tensors backed by one or more read-only memory-mapped
// files. Tensor data aliases the mappings and is invalid after Close.
type File struct {
	mu      sync.Mutex
	maps    [][]byte
	tensors map[string]Tensor
	names   []string
	meta    map[string]string
}

// Open opens a .safetensors file, or a model directory. In a directory it
// uses model.safetensors.index.json when present (all shards are opened and
// checked against the index), else model.safetensors.
func Open(path string) (*File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if !info.IsDir() {
		return openSingle(path)
	}
	index := filepath.Join(path, indexName)
	if ok, err := exists(index); err != nil {
		return nil, err
	} else if ok {
		return openIndex(index)
	}
	single := filepath.Join(path, singleName)
	if ok, err := exists(single); err != nil {
		return nil, err
	} else if ok {
		return openSingle(single)
	}
	return nil, fmt.Errorf("safetensors: %s: found neither %s nor %s", path, indexName, singleName)
}

// exists reports whether path exists; errors other than not-exist are returned.
func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("safetensors: %w", err)
	}
	return true, nil
}

func openSingle(path string) (*File, error) {
	f := &File{tensors: map[string]Tensor{}, meta: map[string]string{}}
	tensors, meta, err := f.addShard(path)
	if err != nil {
		return nil, err
	}
	for _, t := range tensors {
		f.tensors[t.Name] = t
	}
	maps.Copy(f.meta, meta)
	f.finish()
	return f, nil
}

// addShard maps and parses one file, recording the mapping for Close. On
// error nothing is left mapped by this call.
func (f *File) addShard(path string) ([]Tensor, map[string]string, error) {
	buf, err := mapFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	tensors, meta, err := parseFile(buf)
	if err != nil {
		syscall.Munmap(buf)
		return nil, nil, fmt.Errorf("safetensors: %s: %w", path, err)
	}
	f.maps = append(f.maps, buf)
	return tensors, meta, nil
}

// mapFile maps a whole file read-only.
func mapFile(path string) ([]byte, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	info, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	size := info.Size()
	switch {
	case !info.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case size == 0:
		return nil, errors.New("file is empty")
	case size > math.MaxInt:
		return nil, fmt.Errorf("file is too large to map (%d bytes)", size)
	}
	buf, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return buf, nil
}

// finish computes the sorted name list once all tensors are in.
func (f *File) finish() {
	f.names = slices.Sorted(maps.Keys(f.tensors))
}

// Names returns the tensor names, sorted.
func (f *File) Names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.names)
}

// Tensor returns the named tensor. Its Data is read-only and valid until
// Close; after Close every lookup fails.
func (f *File) Tensor(name string) (Tensor, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tensors[name]
	t.Shape = slices.Clone(t.Shape)
	return t, ok
}

// Metadata returns a copy of the __metadata__ of all files, merged; for
// sharded models a later shard (in name order) wins on conflicting keys.
func (f *File) Metadata() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.meta)
}

// Close unmaps every file. It is safe to call more than once.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, m := range f.maps {
		if err := syscall.Munmap(m); err != nil {
			errs = append(errs, fmt.Errorf("safetensors: munmap: %w", err))
		}
	}
	f.maps, f.tensors, f.names = nil, nil, nil
	return errors.Join(errs...)
}
