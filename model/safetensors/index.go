package safetensors

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// openIndex opens a sharded model described by a model.safetensors.index.json
// whose "weight_map" maps every tensor name to the shard file holding it.
// Every listed shard must exist, every mapped tensor must be in the shard the
// index names, and every tensor in a shard must be listed for that shard.
func openIndex(indexPath string) (*File, error) {
	weights, err := readWeightMap(indexPath)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %s: %w", indexPath, err)
	}
	f := &File{tensors: map[string]Tensor{}, meta: map[string]string{}}
	if err := f.loadShards(indexPath, weights); err != nil {
		f.Close()
		return nil, err
	}
	f.finish()
	return f, nil
}

// readWeightMap parses the index file's weight_map; other keys are ignored.
func readWeightMap(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var weights map[string]string
	err = forEachMember(raw, func(key string, val []byte) error {
		if key != "weight_map" {
			return nil
		}
		weights = map[string]string{}
		return forEachMember(val, func(name string, shard []byte) error {
			s, err := parseString(shard)
			if err != nil {
				return fmt.Errorf("weight_map[%q]: %w", name, err)
			}
			if !filepath.IsLocal(s) {
				return fmt.Errorf("weight_map[%q]: shard %q is not a local file name", name, s)
			}
			weights[name] = s
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if weights == nil {
		return nil, errors.New("no weight_map")
	}
	return weights, nil
}

// loadShards maps each distinct shard and cross-checks it with the index.
func (f *File) loadShards(indexPath string, weights map[string]string) error {
	dir := filepath.Dir(indexPath)
	shards := slices.Sorted(maps.Values(weights))
	shards = slices.Compact(shards)
	for _, shard := range shards {
		path := filepath.Join(dir, shard)
		tensors, meta, err := f.addShard(path)
		if err != nil {
			return fmt.Errorf("%w (listed in %s)", err, indexPath)
		}
		for _, t := range tensors {
			want, ok := weights[t.Name]
			if !ok {
				return fmt.Errorf("safetensors: %s: tensor %q in shard %s is missing from the weight_map",
					indexPath, t.Name, shard)
			}
			if want != shard {
				return fmt.Errorf("safetensors: %s: tensor %q is in shard %s but the weight_map names %s",
					indexPath, t.Name, shard, want)
			}
			f.tensors[t.Name] = t
		}
		maps.Copy(f.meta, meta)
	}
	for _, name := range slices.Sorted(maps.Keys(weights)) {
		if _, ok := f.tensors[name]; !ok {
			return fmt.Errorf("safetensors: %s: tensor %q is not in its shard %s",
				indexPath, name, weights[name])
		}
	}
	return nil
}
