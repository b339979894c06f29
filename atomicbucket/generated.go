package atomicbucket

// GeneratedAPIVersion1 is referenced by every package limitgen generates
// (`const _ = atomicbucket.GeneratedAPIVersion1`). A runtime that changes what
// generated code relies on renames it, so that an out-of-date generated package
// fails to build instead of misbehaving.
const GeneratedAPIVersion1 = true
