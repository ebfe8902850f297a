//! GBNF: the parser against llama.cpp's syntax, and the translated grammars against strings that
//! must and must not match (fed as SmolLM2 tokens through the matcher), including every example
//! grammar of llama.cpp's `grammars/` folder (`tests/fixtures/gbnf`).

use super::super::tests::smol;
use super::super::{Constraint, ConstraintSpec};
use super::to_lark;

/// Whether the grammar accepts `text` in full: each token of it is allowed in turn, then an
/// end-of-generation token.
fn matches(grammar: &str, text: &str) -> Option<bool> {
    let (tok, _) = smol()?;
    accepts_tokens(grammar, &tok.encode(text, false, false).expect("tokenize"))
}

/// Whether the grammar accepts these tokens in turn, then an end-of-generation token.
fn accepts_tokens(grammar: &str, tokens: &[u32]) -> Option<bool> {
    let (tok, env) = smol()?;
    let mut c = Constraint::new(env, &ConstraintSpec::Gbnf(grammar.into()))
        .unwrap_or_else(|e| panic!("{grammar:?}: {e}"));
    for &t in tokens {
        if c.accept(t).is_err() {
            return Some(false);
        }
    }
    let eos = tok.eos().expect("SmolLM2 has an EOS");
    Some(c.accept(eos).is_ok())
}

/// Checks each `(grammar, passing, failing)` case.
fn check(cases: &[(&str, &[&str], &[&str])]) {
    for (g, pass, fail) in cases {
        for s in *pass {
            let Some(ok) = matches(g, s) else { return };
            assert!(ok, "{g:?} must accept {s:?}");
        }
        for s in *fail {
            assert_eq!(matches(g, s), Some(false), "{g:?} must reject {s:?}");
        }
    }
}

#[test]
fn literals_classes_groups_and_repetitions() {
    check(&[
        (r#"root ::= "yes" | "no""#, &["yes", "no"], &["maybe", "yesno", ""]),
        (r#"root ::= [a-z]+ "!""#, &["abc!", "x!"], &["!", "ABC!", "abc"]),
        (r#"root ::= [^0-9]*"#, &["", "abc", "a b"], &["a1"]),
        (r#"root ::= "a"{3}"#, &["aaa"], &["aa", "aaaa"]),
        (r#"root ::= "a"{2,}"#, &["aa", "aaaaa"], &["a"]),
        (r#"root ::= "a"{1,3} "b""#, &["ab", "aaab"], &["b", "aaaab"]),
        (r#"root ::= ("ab" | "c")* "."  # comment"#, &[".", "abcab."], &["a.", "ab"]),
        (r#"root ::= . . "z""#, &["xyz", "\n\tz"], &["yz"]),
        (r#"root ::= "\x41\u00e9\t" [\[\]\-]"#, &["Aé\t[", "Aé\t-"], &["Aé\ta"]),
    ]);
}

#[test]
fn rules_newlines_and_splits_that_a_greedy_lexer_would_miss() {
    check(&[
        (
            "root ::= greeting \" \" name\ngreeting ::= \"hi\" | \"hello\"\nname ::= [A-Z] [a-z]*\n",
            &["hi Bob", "hello Al"],
            &["hey Bob", "hi bob"],
        ),
        // Newlines inside a group and after `|` continue the rule.
        ("root ::= (\n  \"a\" |\n  \"b\"\n)\n", &["a", "b"], &["c"]),
        // GBNF is a plain context-free grammar: "abc" is "a" then "bc".
        (r#"root ::= ("a" | "ab") "bc""#, &["abc", "abbc"], &["ab"]),
        (r#"root ::= [a-z]* "x""#, &["x", "abx", "xxx"], &["xa"]),
        // Rule names with dashes and mixed case, a later definition winning.
        (
            "root ::= My-rule my-rule\nMy-rule ::= \"1\"\nmy-rule ::= \"2\"\nMy-rule ::= \"3\"\n",
            &["32"],
            &["12"],
        ),
    ]);
}

#[test]
fn llama_cpp_example_grammars_compile_and_match() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gbnf");
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("fixtures") {
        let path = e.expect("entry").path();
        let g = std::fs::read_to_string(&path).expect("read");
        let Some((_, env)) = smol() else { return };
        Constraint::new(env, &ConstraintSpec::Gbnf(g)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        n += 1;
    }
    assert!(n >= 8, "{n} grammars");
    let json = read("json.gbnf");
    let arith = read("arithmetic.gbnf");
    let list = read("list.gbnf");
    let chess = read("chess.gbnf");
    check(&[
        (
            &json,
            &[r#"{"a": [1, 2.5e3, true, null], "b": {"c": "d\n"}}"#, "{}"],
            &["[1]", r#"{"a" 1}"#, "{'a': 1}"],
        ),
        (&arith, &["x+1=(2*3)\n", "(10)/5 = y\n"], &["1+\n", "x=\n", "x=1+2\n"]),
        (&list, &["- one\n- two\n"], &["one\n"]),
        (&chess, &["1. e4 e5\n2. Nf3 Nc6\n"], &["1. e9 e5\n"]),
    ]);
}

#[test]
fn malformed_grammars_are_named_with_their_position() {
    let err = |g: &str| to_lark(g, &[]).expect_err(g).to_string();
    assert!(err("root ::= foo").contains("undefined rule `foo`"));
    assert!(err("start ::= \"a\"").contains("no `root` rule"));
    let e = err("root ::= \"a\"\nx ::= [a-z");
    assert!(e.contains("line 2, column 11") && e.contains("unterminated character class"), "{e}");
    assert!(err("root ::= \"a\" )").contains("expected the end of the rule"));
    assert!(err("root := \"a\"").contains("expected `::=`"));
    assert!(err("root ::= \"\\q\"").contains("unknown escape `\\q`"));
    assert!(err("root ::= \"a\"{2001}").contains("over the limit of 2000"));
    assert!(err("root ::= * \"a\"").contains("needs a preceding item"));
    assert!(err("root ::= !<x>").contains("needs a token id: `!<[id]>`"), "{}", err("root ::= !<x>"));
    assert!(err("root ::= !x").contains("expected `<` after `!`"));
    assert!(err("root ::= <[1-5]>").contains("expected `]>` after a token id"));
    assert!(err("root ::= <[4294967296]>").contains("too large"));
    assert!(err("root ::= <a b>").contains("<a b> is not a special token's name"));
    // Braces take newlines only inside a group, as in llama.cpp.
    assert!(err("root ::= \"a\"{2,\n3}").contains("expected `}`"));
    assert!(to_lark("root ::= (\"a\"{ 2,\n3 })", &[]).is_ok());
    // A maximum over llama.cpp's limit becomes unbounded, as there.
    assert!(to_lark("root ::= \"a\"{2,5000}", &[]).expect("parses").contains("{2,}"));
}

#[test]
fn the_translation_uses_one_character_terminals_and_renamed_rules() {
    let lark = to_lark("root ::= Ab-c\nAb-c ::= \"hi\" [^a-c]", &[]).expect("parses");
    assert_eq!(lark, "start: g_root\ng_root: g_ab_c\ng_ab_c: (/\\x{68}/ /\\x{69}/) /[^\\x{61}-\\x{63}]/\n");
}

/// Cases in the style of llama.cpp's `test-grammar-integration.cpp`: an expression grammar with
/// function calls, any-character items around a literal, and mixed quantifiers.
#[test]
fn llama_cpp_integration_style_cases() {
    let expr = r#"
        root ::= expression
        expression ::= term ws (("+"|"-") ws term)*
        term ::= factor ws (("*"|"/") ws factor)*
        factor ::= number | variable | "(" expression ")" | function-call
        number ::= [0-9]+
        variable ::= [a-zA-Z_][a-zA-Z0-9_]*
        function-call ::= variable ws "(" (expression ("," ws expression)*)? ")"
        ws ::= [ \t\n\r]?"#;
    let words = "\n        root ::= cons+ vowel* cons? (vowel cons)*\n        vowel ::= [aeiouy]\n        \
                 cons ::= [bcdfghjklmnpqrstvwxyz]\n        ";
    check(&[
        (
            expr,
            &["42", "x+10", "(a + b) * (c - d)", "func()", "f(g(x), h(y, z))", "a * (b + c) - d / e"],
            &["+", "x + + y", "func(,)", "func(x y)", "(a + b", "x + 10 +", "f(g(x), h(y, z)"],
        ),
        (
            "root ::= ... \"abc\" ...\n   ",
            &["abcabcabc", "aaaabcccc", "🔵🟠✅abc❌🟠🔵"],
            &["aaabcccc", "aaaabccccc", "🔵🟠abc🟠🔵"],
        ),
        (words, &["yes", "no", "noyes", "crwth", "four", "bryyyy"], &["yess", "yesno", "forty", "catyyy"]),
    ]);
}

/// llama.cpp's "simple grammar with tokens": token ids, and `!<[id]>` as any one token but `id`.
#[test]
fn token_references_and_their_inverse() {
    let g = "root ::= <[10]> content <[11]>\ncontent ::= (!<[11]>)*";
    let lark = to_lark(g, &[0, 2]).expect("parses");
    assert_eq!(lark, "start: g_root\ng_root: <[10]> g_content <[11]>\ng_content: (<[^11,0,2]>)*\n");
    let Some((tok, _)) = smol() else { return };
    let text = |s: &str| tok.encode(s, false, false).expect("tokenize");
    let cat = |parts: &[Vec<u32>]| parts.concat();
    let pass = [
        cat(&[vec![10], text("hello world"), vec![11]]),
        cat(&[vec![10], text("text with "), vec![12], text(" other "), vec![13], vec![11]]),
        vec![10, 11],
        vec![10, 12, 13, 14, 15, 11],
    ];
    let fail = [
        cat(&[vec![10], text("missing end token")]),
        vec![10],
        cat(&[text("missing start token"), vec![11]]),
        vec![10, 11, 11],
        cat(&[vec![11], text("wrong order"), vec![10]]),
    ];
    for t in &pass {
        assert_eq!(accepts_tokens(g, t), Some(true), "must accept {t:?}");
    }
    for t in &fail {
        assert_eq!(accepts_tokens(g, t), Some(false), "must reject {t:?}");
    }
}

/// llama.cpp's `test-grammar-integration.cpp` cases: counted repetitions, a simple expression
/// grammar, and the nested star that once crashed it.
#[test]
fn llama_cpp_integration_repetition_cases() {
    check(&[
        ("root ::= [ab]{4}", &["aaaa", "bbbb", "abab"], &["a", "b", "aaaaa"]),
        ("root ::= [ab]{4,}", &["aaaa", "aaaaab", "bbbb", "ababab"], &["", "aba"]),
        ("root ::= [ab]{0,4}", &["", "a", "aa", "aaa", "aaab"], &["aaaaa"]),
        (
            "root ::= (\"0x\" [A-F0-9]{2} \" \"?){3,5}",
            &["0xFF 0x12 0xAB", "0xFF 0x12 0xAB 0x00 0x00"],
            &["", "0xFF", "0xFF 0x12", "0xFF 0x12 0xAB 0x00 0x00 0x00"],
        ),
        ("root ::= ( [x]* )*", &["", "x", "xx"], &["y", "yy"]),
        (
            "root ::= expr\nexpr ::= term (\"+\" term)*\nterm ::= number\nnumber ::= [0-9]+",
            &["42", "1+2+3+4+5", "123+456"],
            &["+", "/ 3", "1+2+3+4+5+", "12a45"],
        ),
        (r#"root ::= "a"*"#, &["", "a", "aaaaa"], &["b", "ab"]),
        (r#"root ::= "a"+"#, &["a", "aaaaa"], &["", "b", "ab"]),
        (r#"root ::= "a"?"#, &["", "a"], &["aa", "b"]),
    ]);
}
