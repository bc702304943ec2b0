package modelgen

// ChatTemplate is the chat template of generated checkpoints. It writes
// ChatML turns and, like Qwen3.5's own template, Qwen3.5's tool format
// (the tools as JSON in a system block, assistant tool calls as
// <tool_call><function=NAME><parameter=P>, tool results as
// <tool_response> blocks in a user turn) and think blocks
// (reasoning_content of assistant turns; enable_thinking true opens a
// think block in the generation prompt, false adds an empty one). Without
// tools, reasoning and enable_thinking it renders plain ChatML.
const ChatTemplate = `{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- '# Tools\n\nYou may call one or more of these functions:\n\n<tools>' }}
{%- for tool in tools %}{{- '\n' + (tool | tojson) }}{%- endfor %}
{{- '\n</tools>\n\nTo call a function, reply with:\n\n<tool_call>\n<function=NAME>\n<parameter=PARAMETER>\nVALUE\n</parameter>\n</function>\n</tool_call><|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and tools and loop.first %}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' }}
{%- if message.reasoning_content %}{{- '<think>\n' + message.reasoning_content + '\n</think>\n\n' }}{%- endif %}
{{- message.content }}
{%- if message.tool_calls %}
{%- for call in message.tool_calls %}
{%- if not loop.first or message.content %}{{- '\n' }}{%- endif %}
{{- '<tool_call>\n<function=' + call.function.name + '>\n' }}
{%- for name, value in call.function.arguments | items %}
{{- '<parameter=' + name + '>\n' }}
{%- if value is mapping or (value is iterable and value is not string) %}{{- value | tojson }}{%- else %}{{- value | string }}{%- endif %}
{{- '\n</parameter>\n' }}
{%- endfor %}
{{- '</function>\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
{%- else %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking %}{{- '<think>\n' }}
{%- elif enable_thinking is defined %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}`
