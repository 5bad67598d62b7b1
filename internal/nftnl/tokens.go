package nftnl

import (
	"errors"
	"fmt"
	"strings"
)

// Tokens splits an nft command at blanks, keeping a quoted string (with its quotes) as
// one token and the punctuation { } ; , : as tokens of their own.
func Tokens(s string) ([]string, error) {
	out := make([]string, 0, strings.Count(s, " ")+2)
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			i++
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, errors.New("unterminated string")
			}
			out = append(out, s[i:j+1])
			i = j + 1
		case strings.IndexByte("{};,", c) >= 0:
			out = append(out, s[i:i+1])
			i++
		default:
			j := i
			for j < len(s) && strings.IndexByte(" \t\"{};,", s[j]) < 0 {
				j++
			}
			out = append(out, s[i:j]) // "10.0.0.1:80" stays whole; the renderings write " : "
			i = j
		}
	}
	return out, nil
}

// MustTokens is Tokens of a constant text (it panics on an unterminated string).
func MustTokens(s string) []string {
	t, err := Tokens(s)
	if err != nil {
		panic(err)
	}
	return t
}

// Braced returns what is between tok's first token "{" and its last "}".
func Braced(tok []string) ([]string, error) {
	if len(tok) < 2 || tok[0] != "{" || tok[len(tok)-1] != "}" {
		return nil, fmt.Errorf("expected { ... }, got %q", strings.Join(tok, " "))
	}
	return tok[1 : len(tok)-1], nil
}

// SplitOn splits tok at the top-level (outside braces) separators sep.
func SplitOn(tok []string, sep string) [][]string {
	var out [][]string
	depth, start := 0, 0
	for i, t := range tok {
		switch t {
		case "{":
			depth++
		case "}":
			depth--
		case sep:
			if depth == 0 {
				out = append(out, tok[start:i])
				start = i + 1
			}
		}
	}
	return append(out, tok[start:])
}

// FirstN is s cut to n bytes, "..." marking the cut (for error messages).
func FirstN(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
