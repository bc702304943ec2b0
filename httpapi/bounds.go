package httpapi

// bounded wraps a request parser with the bounds on what one request may
// queue: a request with more choices (prompts × n) than the engine ever
// holds could never be admitted, and one asking for more than
// Options.MaxRequestTokens of work would crowd out every other client (and
// keep the queue full after its client went away). Both get a 400, not a
// 429: retrying them cannot help.
func (s *Server) bounded(parse func([]byte) (*job, *apiError)) func([]byte) (*job, *apiError) {
	return func(body []byte) (*job, *apiError) {
		j, aerr := parse(body)
		if aerr != nil {
			return nil, aerr
		}
		if s.maxPending != nil {
			if limit := s.maxPending(); limit > 0 && j.choices() > limit {
				e := badRequest("n", "this request has %d choices (%d prompts × n = %d) but the server holds at most %d requests: it can never be admitted",
					j.choices(), len(j.prompts), j.n, limit)
				e.code = "too_many_choices"
				return nil, e
			}
		}
		limit := orDefault(s.opts.MaxRequestTokens, 4*s.eng.Info().MaxModelLen)
		if limit <= 0 {
			return j, nil
		}
		total := 0
		for p, prompt := range j.prompts {
			total += j.n * (len(prompt) + j.maxTokens[p])
		}
		if total > limit {
			e := badRequest("max_tokens", "this request queues %d tokens (%d prompts × n=%d × (prompt + max_tokens)), over the limit of %d tokens per request; lower n, max_tokens or the number of prompts",
				total, len(j.prompts), j.n, limit)
			e.code = "request_too_large"
			return nil, e
		}
		return j, nil
	}
}
