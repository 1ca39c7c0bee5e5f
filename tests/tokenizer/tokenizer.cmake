# Tokenizer tests (src/tokenizer/). tokenizer_reference_test compares with the
# Hugging Face `tokenizers` package through scripts/tokenizer_reference.py, run
# with $FUTR_PYTHON (scripts/test.sh points it at its venv), else python3.
futr_add_test(tokenizer_test SOURCES tokenizer/tokenizer_test.cpp LIBS futr_tokenizer)
futr_add_test(tokenizer_hf_json_test SOURCES tokenizer/hf_json_test.cpp
              LIBS futr_tokenizer nlohmann_json::nlohmann_json)
futr_add_test(tokenizer_chat_test SOURCES tokenizer/chat_test.cpp LIBS futr_tokenizer)
futr_add_test(tokenizer_reference_test SOURCES tokenizer/tokenizer_reference_test.cpp
              LIBS futr_tokenizer futr_formats nlohmann_json::nlohmann_json)
# SentencePiece (model "llama"): hand-worked cases, and the whole WikiText-2
# test text against Hugging Face `tokenizers` on a vocabulary learned from it
# (scripts/spm_reference.py; skipped when the packages are missing).
futr_add_test(tokenizer_spm_test SOURCES tokenizer/spm_test.cpp LIBS futr_tokenizer)
futr_add_test(tokenizer_spm_reference_test SOURCES tokenizer/spm_reference_test.cpp
              LIBS futr_tokenizer futr_formats nlohmann_json::nlohmann_json)
