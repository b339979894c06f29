package limithttp

// The response header names, in the canonical form net/http's Header keys
// use (textproto.CanonicalMIMEHeaderKey), so that setting them is a map store
// with no canonicalisation. Header names are case-insensitive on the wire;
// HTTP/2 and HTTP/3 send them in lower case.
const (
	HeaderPolicy         = "Ratelimit-Policy"
	HeaderRateLimit      = "Ratelimit"
	HeaderRetryAfter     = "Retry-After"
	HeaderLegacyLimit    = "X-Ratelimit-Limit"
	HeaderLegacyRemain   = "X-Ratelimit-Remaining"
	HeaderLegacyReset    = "X-Ratelimit-Reset"
	headerAuthenticate   = "Www-Authenticate"
	headerContentType    = "Content-Type"
	headerContentOptions = "X-Content-Type-Options"
)
