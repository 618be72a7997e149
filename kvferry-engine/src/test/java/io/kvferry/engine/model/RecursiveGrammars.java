package io.kvferry.engine.model;

import java.util.List;

/**
 * Recursive GBNF grammars the structured-output tests share: nested parentheses inside a left-recursive list; left-recursive
 * arithmetic; a small JSON. GrammarOutputsTest serves them through PD on the real model, GrammarMaskCacheTest holds the
 * precomputed mask to the full walk on them.
 */
public final class RecursiveGrammars {
    public static final List<String> EXAMPLES = List.of(
            """
            root ::= name " " verb " " things "."
            name ::= "Lily" | "Tom" | "Sue"
            verb ::= "saw" | "had" | "liked"
            things ::= things " and " thing | thing
            thing ::= ("a " | "the ") [a-z]+ | "(" things ")"
            """,
            """
            root ::= expr
            expr ::= expr ("+" | "-") term | term
            term ::= [0-9]{1,3} | "(" expr ")"
            """,
            """
            root ::= object
            value ::= object | array | string | [0-9]+ | "true" | "false" | "null"
            object ::= "{" ( pair ( ", " pair )* )? "}"
            pair ::= string ": " value
            array ::= "[" ( value ( ", " value )* )? "]"
            string ::= "\\"" [a-z ]{0,12} "\\""
            """);

    private RecursiveGrammars() {
    }
}
