//! The OpenAI function definitions of the built-in tools, as `GET /tools` lists them.

use serde_json::{Value, json};

/// A parameter: its JSON type and description.
fn p(kind: &str, description: &str) -> Value {
    json!({"type": kind, "description": description})
}

/// A function tool with these parameters (an object schema) and required ones.
fn function(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    let mut parameters = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        parameters["required"] = json!(required);
    }
    json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
}

/// The definition of the built-in tool `name` (`null` for another name).
pub(crate) fn of(name: &str) -> Value {
    match name {
        "read_file" => function(
            name,
            "Read a text file, whole or a 1-based inclusive line range. With append_loc, each line \
             starts with its number and an arrow (\"12\u{2192}...\").",
            json!({
                "path": p("string", "The file to read"),
                "start_line": p("integer", "First line, 1-based (default 1)"),
                "end_line": p("integer", "Last line, inclusive (default: the end of the file)"),
                "append_loc": p("boolean", "Prefix every line with its number"),
            }),
            &["path"],
        ),
        "file_glob_search" => function(
            name,
            "List the files (or folders, type \"dir\"/\"all\") under a folder that match a glob. \
             Files ignored by git and large generated folders (.git, node_modules, build, target, \
             ...) are skipped. A pattern without '/' matches file names at any depth; one with '/' \
             matches the relative path, with \"**/\" put in front unless it starts with \"**\" or \
             '/'. Folders are shown with a trailing '/'.",
            json!({
                "path": p("string", "The folder to search"),
                "include": p("string", "Glob of the entries to list (default \"**\")"),
                "exclude": p("string", "Glob of the entries to leave out"),
                "type": p("string", "\"file\" (default), \"dir\" or \"all\""),
                "max_depth": p("integer", "How deep to look (0, the default: any depth; 1: the folder's own entries)"),
                "limit": p("integer", "Most entries to show (at most and by default 100)"),
            }),
            &["path"],
        ),
        "grep_search" => function(
            name,
            "Find the lines matching a regular expression (or a literal text) in a file or in the \
             files under a folder, shown as path:line. Files ignored by git and large generated \
             folders are skipped; include/exclude are globs as for file_glob_search.",
            json!({
                "path": p("string", "The file or folder to search"),
                "pattern": p("string", "The regular expression (or the text, with literal)"),
                "include": p("string", "Glob of the files to search (default \"**\")"),
                "exclude": p("string", "Glob of the files to leave out"),
                "return_line_numbers": p("boolean", "Show line numbers"),
                "literal": p("boolean", "Take the pattern as plain text (default false)"),
                "ignore_case": p("boolean", "Ignore case (default false)"),
                "context_lines": p("integer", "Lines of context before and after each match (default 0)"),
            }),
            &["path", "pattern"],
        ),
        "exec_shell_command" => function(
            name,
            "Run a shell command (sh -c) and return what it printed, stdout and stderr together, \
             and its exit code.",
            json!({
                "command": p("string", "The command line"),
                "timeout": p("integer", "Seconds before it is stopped (default 10, at most 60)"),
                "max_output_size": p("integer", "Most bytes of output returned (default and at most 16384)"),
            }),
            &["command"],
        ),
        "write_file" => function(
            name,
            "Write a file, creating it and its folders when needed, or replacing it. edit_file \
             changes part of a file.",
            json!({"path": p("string", "The file to write"), "content": p("string", "Its new content")}),
            &["path", "content"],
        ),
        "edit_file" => function(
            name,
            "Change a file by exact text replacements. Each old_text must occur once in the file \
             and is looked for in the original content (not after the other edits); edits must \
             not overlap (merge neighbouring changes into one edit). write_file replaces a whole file.",
            json!({"path": p("string", "The file to change"), "edits": {
                "type": "array",
                "description": "The replacements, one or more",
                "items": {"type": "object", "properties": {
                    "old_text": p("string", "The exact text to replace, unique in the file"),
                    "new_text": p("string", "The text to put in its place"),
                }, "required": ["old_text", "new_text"]},
            }}),
            &["path", "edits"],
        ),
        "get_info" => function(
            name,
            "Tell the operating system (name and version) and the working folder the tools use.",
            json!({}),
            &[],
        ),
        _ => Value::Null,
    }
}
