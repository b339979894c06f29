// Package readme holds the README's first step: policy.yaml is the policy
// it writes, word for word (TestREADMEPolicy), and limits/ what it
// generates, so that the README's later snippets that use it compile against
// it, not against the quickstart's own policy.
package readme

//go:generate go tool gen -policy policy.yaml -out limits
