package event

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
)

// logprobScale is the resolution PackTokens keeps a logprob at: 1/8 nat,
// enough to colour a token (a probability to within 12%), in one byte.
const logprobScale = 8

// PackTokens packs a completion's token ids and the sampler's logprob of
// each into CompletionScored.TokenLogprobs: per token the id as a uvarint
// and the logprob in eighths of a nat as one byte (0 to -255/8, lower
// clamped), base64 (standard) as a whole. About 4 characters a token.
func PackTokens(ids []int, logprobs []float64) string {
	b := make([]byte, 0, 3*len(ids))
	for i, id := range ids {
		b = binary.AppendUvarint(b, uint64(max(id, 0)))
		lp := 0.0
		if i < len(logprobs) {
			lp = logprobs[i]
		}
		q := math.Round(-lp * logprobScale)
		if math.IsNaN(q) || q > 255 {
			q = 255
		}
		b = append(b, byte(max(q, 0)))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// UnpackTokens reverses PackTokens.
func UnpackTokens(s string) (ids []int, logprobs []float64, err error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, nil, errors.New("token logprobs: not base64")
	}
	for len(b) > 0 {
		id, n := binary.Uvarint(b)
		if n <= 0 || n >= len(b) {
			return nil, nil, errors.New("token logprobs: truncated")
		}
		ids = append(ids, int(id))
		logprobs = append(logprobs, -float64(b[n])/logprobScale)
		b = b[n+1:]
	}
	return ids, logprobs, nil
}
