package emit

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
	"github.com/limitgen/limitgen/gen/internal/model"
)

// emitCompositeKey is a composite key's struct, its text form (String) and
// the reading of that form (Parse…), which run-time numbers name keys by.
func emitCompositeKey(r model.Rule) jen.Code {
	typ := r.KeyType
	var desc []string
	var fieldsDecl []jen.Code
	for _, f := range r.Fields {
		desc = append(desc, f.Name+" ("+f.Type+")")
		fieldsDecl = append(fieldsDecl, jen.Id(f.GoName).Id(f.Type))
	}
	g := jen.Line()
	g.Comment(fmt.Sprintf("%s is rule %s's key: %s.", typ, r.Name, strings.Join(desc, ", "))).Line()
	g.Type().Id(typ).Struct(fieldsDecl...).Line().Line()

	str := []jen.Code{}
	for i, f := range r.Fields {
		if i > 0 {
			str = append(str, jen.Id("b").Op("=").Append(jen.Id("b"), jen.LitRune(',')))
		}
		v := jen.Id("k").Dot(f.GoName)
		switch unsigned, _ := intBits(f.Type); {
		case f.Type == "string":
			str = append(str, jen.Id("b").Op("=").Add(gi("AppendKeyField")).Call(jen.Id("b"), v))
		case unsigned:
			str = append(str, jen.Id("b").Op("=").Qual("strconv", "AppendUint").Call(jen.Id("b"), jen.Uint64().Call(v), jen.Lit(10)))
		default:
			str = append(str, jen.Id("b").Op("=").Qual("strconv", "AppendInt").Call(jen.Id("b"), jen.Int64().Call(v), jen.Lit(10)))
		}
	}
	str = append(str, jen.Return(jen.Id("b"), jen.Nil()))
	g.Comment("AppendText appends the key's text form to b: its fields in order, comma-separated, a string's").Line()
	g.Comment("'%', ',' and '#' escaped (genimpl.AppendKeyField). Run-time numbers name the key by it, a store").Line()
	g.Comment("keeps its bucket under it, and an interval rule places the key's grid by its hash.").Line()
	g.Func().Params(jen.Id("k").Id(typ)).Id("AppendText").Params(jen.Id("b").Index().Byte()).Params(jen.Index().Byte(), jen.Error()).Block(str...).Line().Line()
	g.Comment("String is the key's text form (AppendText).").Line()
	g.Func().Params(jen.Id("k").Id(typ)).Id("String").Params().String().Block(
		jen.Var().Id("buf").Index(jen.Lit(64)).Byte(),
		jen.List(jen.Id("b"), jen.Id("_")).Op(":=").Id("k").Dot("AppendText").Call(jen.Id("buf").Index(jen.Op(":").Lit(0))),
		jen.Return(jen.String().Call(jen.Id("b"))),
	).Line().Line()

	fail := func(format string, args ...jen.Code) jen.Code {
		return jen.Return(jen.Id(typ).Values(), jen.Qual("fmt", "Errorf").Call(append([]jen.Code{jen.Lit(format)}, args...)...))
	}
	parse := []jen.Code{
		jen.List(jen.Id("f"), jen.Id("ok")).Op(":=").Add(gi("KeyFields")).Call(jen.Id("s"), jen.Lit(len(r.Fields))),
		jen.If(jen.Op("!").Id("ok")).Block(fail("%q is not a key of rule "+r.Name+": "+strings.Join(desc, ", ")+", comma-separated", jen.Id("s"))),
		jen.Var().Id("k").Id(typ),
	}
	for i, f := range r.Fields {
		fi := jen.Id("f").Index(jen.Lit(i))
		if f.Type == "string" {
			parse = append(parse,
				jen.If(keyBad(fi)).Block(fail("key %q of rule "+r.Name+": field "+f.Name+" is empty or longer than %d bytes", jen.Id("s"), vd("MaxKeyLen"))),
				jen.Id("k").Dot(f.GoName).Op("=").Add(fi))
			continue
		}
		unsigned, n := intBits(f.Type)
		call := jen.Qual("strconv", "ParseInt")
		if unsigned {
			call = jen.Qual("strconv", "ParseUint")
		}
		parse = append(parse,
			jen.List(jen.Id("v"+strconv.Itoa(i)), jen.Err()).Op(":=").Add(call).Call(fi, jen.Lit(10), jen.Lit(n)),
			jen.If(jen.Err().Op("!=").Nil()).Block(fail("key %q of rule "+r.Name+": field "+f.Name+" is not a "+f.Type, jen.Id("s"))),
			jen.Id("k").Dot(f.GoName).Op("=").Id(f.Type).Call(jen.Id("v"+strconv.Itoa(i))))
	}
	parse = append(parse, jen.Return(jen.Id("k"), jen.Nil()))
	if !r.IsWindow() && !r.IsInFlight() { // a window's or a slot table places no grid
		g.Comment("gridHash places the key's interval grid: the hash of its text form (genimpl.TextHash).").Line()
		g.Func().Params(jen.Id("k").Id(typ)).Id("gridHash").Params().Uint64().Block(
			jen.Var().Id("buf").Index(jen.Lit(64)).Byte(),
			jen.List(jen.Id("b"), jen.Id("_")).Op(":=").Id("k").Dot("AppendText").Call(jen.Id("buf").Index(jen.Op(":").Lit(0))),
			jen.Return(gi("TextHash").Call(jen.Id("b"))),
		).Line().Line()
	}
	g.Comment(fmt.Sprintf("Parse%s reads a %s from its text form (String).", typ, typ)).Line()
	g.Func().Id("Parse"+typ).Params(jen.Id("s").String()).Params(jen.Id(typ), jen.Error()).Block(parse...).Line()
	return g
}

// emitCompositeKeyRead is emitKey for a composite key: each field from its
// sources (those whose Field it is), then the struct, ok when every field
// has one.
func emitCompositeKeyRead(d *door, k, ok string, r model.Rule, srcs []model.KeySource, ord int, pattern string) []jen.Code {
	out := []jen.Code{jen.Var().Id(k).Id(r.KeyType), jen.Id(ok).Op(":=").True()}
	for fi, f := range r.Fields {
		var own []model.KeySource
		for _, s := range srcs {
			if s.Field == fi {
				own = append(own, s)
			}
		}
		fk, fok := k+"f"+strconv.Itoa(fi), ok+"f"+strconv.Itoa(fi)
		block := emitKey(d, fk, fok, f.Type, own, ord, pattern)
		block = append(block, jen.List(jen.Id(k).Dot(f.GoName), jen.Id(ok)).Op("=").List(jen.Id(fk), jen.Id(ok).Op("&&").Id(fok)))
		out = append(out, jen.Block(block...))
	}
	return out
}

// emitRuleKey is the statements that read the key of route r's rule entry
// j (r.Rules[j], keyed) into kj and okj, as its sources say, then missing
// when no source has one; and kj's name.
func emitRuleKey(m *model.Model, d *door, r model.Route, j int, missing jen.Code) ([]jen.Code, string) {
	rule := m.Rules[r.Rules[j]]
	k, ok := "k"+strconv.Itoa(j), "ok"+strconv.Itoa(j)
	var read []jen.Code
	if rule.Composite() {
		read = emitCompositeKeyRead(d, k, ok, rule, r.Keys[j], r.Ordinal, r.Pattern)
	} else {
		read = emitKey(d, k, ok, rule.KeyType, r.Keys[j], r.Ordinal, r.Pattern)
	}
	return append(read, jen.If(jen.Op("!").Id(ok)).Block(missing)), k
}

// keyOK is the condition that string v can be a key: not empty, at most
// verdict.MaxKeyLen bytes; keyBad is its negation. v is a name or a
// selector, read twice; either joins a chain of its own operator without
// parentheses.
func keyOK(v *jen.Statement) *jen.Statement {
	return v.Clone().Op("!=").Lit("").Op("&&").Len(v.Clone()).Op("<=").Add(vd("MaxKeyLen"))
}

func keyBad(v *jen.Statement) *jen.Statement {
	return v.Clone().Op("==").Lit("").Op("||").Len(v.Clone()).Op(">").Add(vd("MaxKeyLen"))
}
