// Package genimpl is the runtime that only code limitgen generates calls,
// as protobuf's protoimpl is. It holds:
//
//   - the limiters a generated rule embeds and adds its folded Allow to:
//     Keyed and Global over atomicbucket's Table and Bucket, KeyedWindow and
//     GlobalWindow over atomicwindow's, with a request's costs in a Cost;
//   - the checks a generated package makes of numbers given at run time
//     (CheckCost, CheckMaxCost) and of its folded units (MustUnits);
//   - a rule's Policy once its numbers changed (InForce, InForceList), a
//     constructor's check of its hooks (NilHooks), and APIVersion5, which a
//     generated package names so that a runtime it does not match fails to
//     build.
//
// A user meets Keyed's and the others' methods through the generated types
// that embed them; the package itself follows the generator's needs and
// carries no compatibility promise of its own: regenerate (go generate) after
// upgrading limitgen, and do not call it from hand-written code.
package genimpl
