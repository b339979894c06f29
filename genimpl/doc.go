// Package genimpl is the runtime that only code limitgen generates calls,
// as protobuf's protoimpl is: a rule's Policy once its numbers changed
// (InForce, InForceList) and a constructor's check of its hooks
// (NilHooks). Its API follows the generator's needs and carries no
// compatibility promise of its own: regenerate (go generate) after
// upgrading limitgen, and do not call it from hand-written code.
package genimpl
