package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"cohort/model/tokenizer"
)

// inputFlags are the inputs of generate and score: token ids (--tokens), a
// JSON file of one or several prompts (--ids-file), or text (--prompt).
type inputFlags struct{ tokens, idsFile, prompt string }

// register adds --tokens, --ids-file and --prompt (its default and usage
// are the command's).
func (f *inputFlags) register(fs *flag.FlagSet, prompt, promptUsage string) {
	fs.StringVar(&f.tokens, "tokens", "", "comma-separated prompt token ids (instead of --prompt)")
	fs.StringVar(&f.idsFile, "ids-file", "", "JSON file of prompt token ids: one prompt [1,2,...] or several [[...],[...]] (instead of --prompt)")
	fs.StringVar(&f.prompt, "prompt", prompt, promptUsage)
}

// runPrompts checks run, reads input and runs the prompts through the
// engine (onEngine) with --tp > 1 or --devices, else on one rank (onRank).
func runPrompts(run placementFlags, input inputFlags, onEngine, onRank func(promptInput) error) error {
	if err := run.check(); err != nil {
		return err
	}
	in, err := input.read()
	if err != nil {
		return err
	}
	if _, _, _, err := backendFactory(run.device, run.threads); err != nil {
		return err
	}
	if run.engine() {
		return onEngine(in)
	}
	return onRank(in)
}

// promptInput is a command's input once its flags are read: token-id
// prompts, or text the model's tokenizer encodes.
type promptInput struct {
	ids    [][]int32 // from --tokens or --ids-file; nil: text
	nested bool      // --ids-file held a list of prompts
	from   string    // the flag ids came from, for errors
	text   string
}

// read parses --tokens or --ids-file; with neither the input is --prompt's
// text.
func (f inputFlags) read() (promptInput, error) {
	switch {
	case f.tokens != "":
		ids, err := parseIDs(f.tokens)
		if err != nil {
			return promptInput{}, fmt.Errorf("--tokens: %w", err)
		}
		return promptInput{ids: [][]int32{ids}, from: "--tokens"}, nil
	case f.idsFile != "":
		ids, nested, err := readIDsFile(f.idsFile)
		if err != nil {
			return promptInput{}, fmt.Errorf("--ids-file: %w", err)
		}
		return promptInput{ids: ids, nested: nested, from: "--ids-file"}, nil
	}
	return promptInput{text: f.prompt}, nil
}

// prompts returns the token-id prompts, checked against a vocabulary of
// vocab, or the text encoded by tok.
func (in promptInput) prompts(tok *tokenizer.Tokenizer, vocab int) ([][]int32, error) {
	if in.ids != nil {
		return in.ids, checkVocab(in.ids, vocab, in.from)
	}
	ids := tok.Encode(in.text)
	if len(ids) == 0 {
		return nil, errors.New("the prompt encodes to no tokens")
	}
	return [][]int32{ids}, nil
}

// parseIDs parses comma-separated token ids.
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%q is not a token id", f)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

// readIDsFile reads a JSON array of token ids (one prompt), or an array of
// such arrays (nested: several prompts).
func readIDsFile(path string) (prompts [][]int32, nested bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err
	}
	var one []int32
	if err := json.Unmarshal(data, &one); err == nil {
		if len(one) == 0 {
			return nil, false, fmt.Errorf("%s: no token ids", path)
		}
		return [][]int32{one}, false, nil
	}
	var many [][]int32
	if err := json.Unmarshal(data, &many); err != nil {
		return nil, false, fmt.Errorf("%s: want a JSON array of token ids or an array of such arrays: %w", path, err)
	}
	if len(many) == 0 {
		return nil, false, fmt.Errorf("%s: no prompts", path)
	}
	for i, ids := range many {
		if len(ids) == 0 {
			return nil, false, fmt.Errorf("%s: prompt %d has no token ids", path, i)
		}
	}
	return many, true, nil
}

// checkVocab rejects ids outside [0, vocab).
func checkVocab(prompts [][]int32, vocab int, flagName string) error {
	for i, ids := range prompts {
		for _, id := range ids {
			if id < 0 || int(id) >= vocab {
				return fmt.Errorf("%s: prompt %d: id %d is outside the vocabulary [0, %d)", flagName, i, id, vocab)
			}
		}
	}
	return nil
}

// longest is the length of the longest prompt.
func longest(prompts [][]int32) int {
	n := 0
	for _, ids := range prompts {
		n = max(n, len(ids))
	}
	return n
}

// encodeResults writes one result per prompt as JSON: the list when the
// input held several prompts (nested), else the one result.
func encodeResults[T any](enc *json.Encoder, all []T, nested bool) error {
	if nested {
		return enc.Encode(all)
	}
	return enc.Encode(all[0])
}
