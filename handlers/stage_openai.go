package handlers

import (
	"time"

	"github.com/flightdeck-ai/flightdeck/handlers/model"
)

// OpenAIStage overrides, for one stage whose model is "openai", the OpenAI adapter settings
// every stage otherwise shares. Those come from model.OpenAIConfigFromEnv: OPENAI_BASE_URL,
// OPENAI_MODEL and the key. A zero field keeps the shared value. The API key is never set here:
// a stage file is configuration, not a secret.
type OpenAIStage struct {
	// Model is the provider's model name for this stage.
	Model string `yaml:"model"`
	// BaseURL is the API root for this stage, such as another provider or gateway.
	BaseURL string `yaml:"baseURL"`
	// SystemPrompt is sent as the first "system" message of every call of this stage.
	SystemPrompt string `yaml:"systemPrompt"`
	// Timeout bounds each call of this stage.
	Timeout time.Duration `yaml:"timeout"`
	// MaxTokens, if positive, is sent as "max_tokens".
	MaxTokens int `yaml:"maxTokens"`
	// Temperature, if set, is sent as "temperature".
	Temperature *float64 `yaml:"temperature"`
	// Stream, when set, asks for a streamed response with progress on every chunk.
	Stream *bool `yaml:"stream"`
}

// Apply returns base with the stage's overrides. A nil o returns base unchanged.
func (o *OpenAIStage) Apply(base model.OpenAIConfig) model.OpenAIConfig {
	if o == nil {
		return base
	}
	if o.Model != "" {
		base.Model = o.Model
	}
	if o.BaseURL != "" {
		base.BaseURL = o.BaseURL
	}
	if o.SystemPrompt != "" {
		base.SystemPrompt = o.SystemPrompt
	}
	if o.Timeout != 0 {
		base.Timeout = o.Timeout
	}
	if o.MaxTokens != 0 {
		base.MaxTokens = o.MaxTokens
	}
	if o.Temperature != nil {
		t := *o.Temperature
		base.Temperature = &t
	}
	if o.Stream != nil {
		base.Stream = *o.Stream
	}
	return base
}
