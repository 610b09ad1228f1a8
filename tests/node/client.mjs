// What every script shares: OpenAI's Node client pointed at the gateway the Python test opened.
// The test passes the gateway's /v1 address and a key in the environment, and reads one JSON line
// from stdout: the script's findings, which the test asserts on.
import OpenAI from "openai";

export function gatewayClient(apiKey = process.env.FOLDGATE_API_KEY) {
  const baseURL = process.env.FOLDGATE_BASE_URL;
  if (!baseURL || !apiKey) {
    throw new Error("FOLDGATE_BASE_URL and FOLDGATE_API_KEY must be set (the Python test sets them)");
  }
  // No retries: a refused request must reach the script as the error the SDK raised, not a second attempt.
  return new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30_000 });
}

export function report(findings) {
  process.stdout.write(JSON.stringify(findings) + "\n");
}

// The parts of an SDK error a test asserts on: which class the SDK chose and the body's fields.
export function describeError(error) {
  return {
    name: error?.constructor?.name,
    is_api_error: error instanceof OpenAI.APIError,
    is_authentication_error: error instanceof OpenAI.AuthenticationError,
    is_bad_request_error: error instanceof OpenAI.BadRequestError,
    status: error?.status,
    code: error?.code ?? null,
    type: error?.type ?? null,
    param: error?.param ?? null,
  };
}

export { OpenAI };
