//! Chat templates by name: llama.cpp's built-in formats (`llama-server --chat-template chatml`)
//! written as Jinja, so that a model whose GGUF has no template, or a wrong one, can be served
//! with a known format. Each renders exactly what llama.cpp's hand-written formatter of the
//! same name produces (the known answers are in the tests, from llama.cpp's
//! `tests/test-chat-template.cpp`).

/// `(name, Jinja source)` of every built-in template.
const BUILTIN: &[(&str, &str)] = &[
    (
        "chatml",
        "{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}",
    ),
    (
        "llama3",
        "{%- for m in messages -%}\
         {{ '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + (m.content | trim) + '<|eot_id|>' }}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}",
    ),
    (
        // No system turn: the system text goes before the next user turn's text.
        "gemma",
        "{%- set ns = namespace(system='') -%}\
         {%- for m in messages -%}\
         {%- if m.role == 'system' -%}{%- set ns.system = ns.system + (m.content | trim) -%}\
         {%- else -%}\
         {%- set role = 'model' if m.role == 'assistant' else m.role -%}\
         {{ '<start_of_turn>' + role + '\\n' }}\
         {%- if ns.system and role != 'model' -%}{{ ns.system + '\\n\\n' }}{%- set ns.system = '' -%}{%- endif -%}\
         {{ (m.content | trim) + '<end_of_turn>\\n' }}\
         {%- endif -%}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}",
    ),
    (
        "phi3",
        "{%- for m in messages -%}{{ '<|' + m.role + '|>\\n' + m.content + '<|end|>\\n' }}{%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}",
    ),
    (
        "phi4",
        "{%- for m in messages -%}{{ '<|im_start|>' + m.role + '<|im_sep|>' + m.content + '<|im_end|>' }}{%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<|im_start|>assistant<|im_sep|>' }}{%- endif -%}",
    ),
    (
        "zephyr",
        "{%- for m in messages -%}{{ '<|' + m.role + '|>\\n' + m.content + '<|endoftext|>\\n' }}{%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}",
    ),
    (
        "vicuna",
        "{%- for m in messages -%}\
         {%- if m.role == 'system' -%}{{ m.content + '\\n\\n' }}\
         {%- elif m.role == 'user' -%}{{ 'USER: ' + m.content + '\\n' }}\
         {%- elif m.role == 'assistant' -%}{{ 'ASSISTANT: ' + m.content + '</s>\\n' }}\
         {%- endif -%}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}",
    ),
    (
        "vicuna-orca",
        "{%- for m in messages -%}\
         {%- if m.role == 'system' -%}{{ 'SYSTEM: ' + m.content + '\\n' }}\
         {%- elif m.role == 'user' -%}{{ 'USER: ' + m.content + '\\n' }}\
         {%- elif m.role == 'assistant' -%}{{ 'ASSISTANT: ' + m.content + '</s>\\n' }}\
         {%- endif -%}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}",
    ),
    (
        "deepseek",
        "{%- for m in messages -%}\
         {%- if m.role == 'system' -%}{{ m.content }}\
         {%- elif m.role == 'user' -%}{{ '### Instruction:\\n' + m.content + '\\n' }}\
         {%- elif m.role == 'assistant' -%}{{ '### Response:\\n' + m.content + '\\n<|EOT|>\\n' }}\
         {%- endif -%}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '### Response:\\n' }}{%- endif -%}",
    ),
    (
        "command-r",
        "{%- set tokens = {'system': '<|SYSTEM_TOKEN|>', 'user': '<|USER_TOKEN|>', 'assistant': '<|CHATBOT_TOKEN|>'} -%}\
         {%- for m in messages -%}\
         {%- if m.role in tokens -%}\
         {{ '<|START_OF_TURN_TOKEN|>' + tokens[m.role] + (m.content | trim) + '<|END_OF_TURN_TOKEN|>' }}\
         {%- endif -%}\
         {%- endfor -%}\
         {%- if add_generation_prompt -%}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{%- endif -%}",
    ),
];

/// The Jinja source of the built-in template `name` (`chatml`, `llama3`, `gemma`, `phi3`,
/// `phi4`, `zephyr`, `vicuna`, `vicuna-orca`, `deepseek`, `command-r`), if there is one.
pub fn builtin_template(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, src)| *src)
}

/// The names [`builtin_template`] knows.
pub fn builtin_template_names() -> impl Iterator<Item = &'static str> {
    BUILTIN.iter().map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChatTemplate, Message, RenderOptions};

    /// llama.cpp's test conversation (tests/test-chat-template.cpp).
    fn conversation() -> Vec<Message> {
        vec![
            Message::system("You are a helpful assistant"),
            Message::user("Hello"),
            Message::assistant("Hi there"),
            Message::user("Who are you"),
            Message::assistant("   I am an assistant   "),
            Message::user("Another question"),
        ]
    }

    fn render(name: &str) -> String {
        let src = builtin_template(name).unwrap_or_else(|| panic!("{name} is built in"));
        let t = ChatTemplate::new(src).unwrap_or_else(|e| panic!("{name} compiles: {e}"));
        let opts = RenderOptions { add_generation_prompt: true, ..Default::default() };
        t.render(&conversation(), &opts).unwrap_or_else(|e| panic!("{name} renders: {e}"))
    }

    #[test]
    fn every_builtin_renders_what_llama_cpp_renders() {
        let expected = [
            (
                "chatml",
                "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n",
            ),
            (
                "llama3",
                "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
            ),
            (
                "gemma",
                "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n",
            ),
            (
                "phi3",
                "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n",
            ),
            (
                "phi4",
                "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>   I am an assistant   <|im_end|><|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant<|im_sep|>",
            ),
            (
                "zephyr",
                "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n",
            ),
            (
                "vicuna",
                "You are a helpful assistant\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\nASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:",
            ),
            (
                "vicuna-orca",
                "SYSTEM: You are a helpful assistant\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\nASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:",
            ),
            (
                "deepseek",
                "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n### Instruction:\nWho are you\n### Response:\n   I am an assistant   \n<|EOT|>\n### Instruction:\nAnother question\n### Response:\n",
            ),
            (
                "command-r",
                "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another question<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
            ),
        ];
        assert_eq!(builtin_template_names().count(), expected.len());
        for (name, want) in expected {
            assert_eq!(render(name), want, "{name}");
        }
        assert_eq!(builtin_template("nope"), None);
    }
}
