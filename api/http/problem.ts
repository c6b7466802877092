/** RFC 9457 problem details. Every error either API returns is one of these. */
export interface ProblemFieldError {
  location: string;
  message: string;
  value?: unknown;
}

/** The Problem schema in the service's own OpenAPI document (same path on both APIs). */
export const PROBLEM_SCHEMA = '/docs/openapi.json#/components/schemas/Problem';

export interface Problem {
  $schema?: string;
  type: string;
  title: string;
  status: number;
  detail: string;
  instance?: string;
  errors?: ProblemFieldError[];
  [extension: string]: unknown;
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  409: 'Conflict',
  413: 'Content Too Large',
  422: 'Unprocessable Content',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  501: 'Not Implemented',
  503: 'Service Unavailable',
};

export const PROBLEM_BASE = 'https://cairn.dev/problems/';

export class ProblemError extends Error {
  override readonly name = 'ProblemError';
  constructor(
    readonly status: number,
    readonly slug: string,
    readonly detail: string,
    readonly extra: { errors?: ProblemFieldError[]; headers?: Record<string, string>; [key: string]: unknown } = {},
  ) {
    super(detail);
  }

  toProblem(instance: string): Problem {
    const { headers: _headers, ...extensions } = this.extra;
    return {
      // As the spec's generated error model does: where the shape of this body is described.
      $schema: PROBLEM_SCHEMA,
      type: `${PROBLEM_BASE}${this.slug}`,
      title: TITLES[this.status] ?? 'Error',
      status: this.status,
      detail: this.detail,
      instance,
      ...extensions,
    };
  }
}

export const badRequest = (detail: string, errors?: ProblemFieldError[]) =>
  new ProblemError(400, 'validation', detail, errors ? { errors } : {});
export const notFound = (detail = 'resource not found') => new ProblemError(404, 'not-found', detail);
export const unauthorized = (detail: string) =>
  new ProblemError(401, 'unauthorized', detail, { headers: { 'WWW-Authenticate': 'Bearer' } });
export const forbidden = (detail: string) => new ProblemError(403, 'forbidden', detail);
